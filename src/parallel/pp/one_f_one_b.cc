// 1F1B (PipeDream-Flush, Megatron-LM's default): rank r runs
// w = min(p − r − 1, M) warm-up forwards, then alternates one forward and
// one backward (oldest micro-batch first) while forwards remain, then the
// remaining backwards. The bubble equals GPipe's, (p − 1) / (M + p − 1),
// but rank r never holds more than min(p − r, M) activations, against
// GPipe's M.
#include <algorithm>

#include "braid/error.h"
#include "braid/schedule.h"

namespace braid::parallel {

Schedule one_f_one_b_schedule(int ranks, int micro_batches) {
  BRAID_CHECK_ARG(ranks >= 1 && micro_batches >= 1, "1f1b: ranks and micro-batches must be ≥ 1");
  std::vector<std::vector<ComputeStep>> order(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    auto& o = order[size_t(r)];
    const int warm = std::min(ranks - r - 1, micro_batches);
    int f = 0, b = 0;
    while (f < warm) o.push_back({true, f++, 0});
    while (f < micro_batches) {
      o.push_back({true, f++, 0});
      o.push_back({false, b++, 0});
    }
    while (b < micro_batches) o.push_back({false, b++, 0});
  }
  return lower_schedule("1f1b", ranks, 1, micro_batches, order);
}

}  // namespace braid::parallel
