// Comparing the final weights two runs wrote (`--checkpoint FILE`).
#pragma once

#include <map>
#include <string>

namespace braid::testing {
// Per tensor of checkpoint `a` whose name starts with `prefix`: the largest
// |a − b| over its elements against the same tensor of `b`; +infinity
// when `b` lacks it or holds another element count.
std::map<std::string, double> weight_diffs(const std::string& a, const std::string& b,
                                           const std::string& prefix = "model/");

// gtest expectations that checkpoints `a` and `b` hold the same "model/"
// tensors (the same names, at least one, with the same element counts)
// and that no element differs by more than `tol`. Returns the number of
// tensors compared.
size_t expect_same_weights(const std::string& a, const std::string& b, double tol,
                           const std::string& what);
}  // namespace braid::testing
