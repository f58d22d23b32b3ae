// Cutting a model's layers into pipeline stages: partition_layers, the
// exact split that minimises the slowest stage, and its printout.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace braid::parallel {

// Cuts layers with these costs into `stages` contiguous non-empty ranges
// with the smallest largest sum (equal costs: a split by count; measured
// per-layer times: a balanced split). Returns stages + 1 bounds, from 0 to
// cost.size(). Throws Error(kInvalidArgument) when stages < 1 or exceeds
// the layers, or a cost is negative.
std::vector<size_t> partition_layers(const std::vector<double>& cost, int stages);
// One line per stage of `bounds` (partition_layers'), with costs in
// seconds: "stage 1: layers [3, 5), predicted 2.500 ms". Throws
// Error(kInvalidArgument) when bounds do not cut the costs' layers.
std::string format_partition(const std::vector<double>& cost, const std::vector<size_t>& bounds);

}  // namespace braid::parallel
