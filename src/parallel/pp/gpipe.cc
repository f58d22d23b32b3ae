// GPipe: every rank runs the forward of all M micro-batches, then their
// backwards, newest first (the last stage starts with the micro-batch its
// modules still hold). Bubble: (p − 1) / (M + p − 1) of the step for any
// forward and backward costs; every stage holds all M activations at the
// turn from forward to backward.
#include "braid/error.h"
#include "braid/schedule.h"

namespace braid::parallel {

Schedule gpipe_schedule(int ranks, int micro_batches) {
  BRAID_CHECK_ARG(ranks >= 1 && micro_batches >= 1,
                  "gpipe: ranks and micro-batches must be ≥ 1");
  std::vector<std::vector<ComputeStep>> order(static_cast<size_t>(ranks));
  for (auto& o : order) {
    for (int m = 0; m < micro_batches; ++m) o.push_back({true, m, 0});
    for (int m = micro_batches - 1; m >= 0; --m) o.push_back({false, m, 0});
  }
  return lower_schedule("gpipe", ranks, 1, micro_batches, order);
}

}  // namespace braid::parallel
