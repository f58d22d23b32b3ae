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
}  // namespace braid::testing
