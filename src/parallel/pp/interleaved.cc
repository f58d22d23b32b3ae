// Interleaved 1F1B (Megatron-LM, Narayanan et al. 2021): each rank holds
// v chunks, virtual stages r, r + p, …, r + (v − 1)p. Forwards go through
// micro-batches in groups of p: the group's p micro-batches on chunk 0,
// then on chunk 1, …; backwards likewise with the chunks reversed. Rank r
// runs (p − r − 1)·2 + (v − 1)·p warm-up forwards (capped at M·v), then
// alternates forward and backward, then drains. As in Megatron, a steady
// forward's output is sent after the backward that follows it, with it. A chunk is 1/v of the
// rank's layers, so the bubble shrinks to about (p − 1) / (v·M + p − 1)
// at the price of v times the messages.
#include <algorithm>

#include "braid/error.h"
#include "braid/schedule.h"

namespace braid::parallel {

Schedule interleaved_schedule(int ranks, int micro_batches, int chunks) {
  BRAID_CHECK_ARG(ranks >= 1 && micro_batches >= 1 && chunks >= 2,
                  "interleaved: needs ranks ≥ 1, micro-batches ≥ 1 and chunks ≥ 2 (got " +
                      std::to_string(ranks) + ", " + std::to_string(micro_batches) + ", " +
                      std::to_string(chunks) + ")");
  BRAID_CHECK_ARG(micro_batches % ranks == 0,
                  "interleaved: micro-batches (" + std::to_string(micro_batches) +
                      ") must be a multiple of the ranks (" + std::to_string(ranks) + ")");
  const int total = micro_batches * chunks;
  const int group = ranks * chunks;
  auto at = [&](int k, bool forward) {
    const int c = (k % group) / ranks;
    return ComputeStep{forward, (k / group) * ranks + k % ranks, forward ? c : chunks - 1 - c};
  };
  std::vector<std::vector<ComputeStep>> order(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    auto& o = order[size_t(r)];
    const int warm = std::min((ranks - r - 1) * 2 + (chunks - 1) * ranks, total);
    int f = 0, b = 0;
    while (f < warm) o.push_back(at(f++, true));
    while (f < total) {  // a forward and a backward, then their messages
      o.push_back(at(f++, true));
      o.back().with_next = true;
      o.push_back(at(b++, false));
    }
    while (b < total) o.push_back(at(b++, false));
  }
  return lower_schedule("interleaved", ranks, chunks, micro_batches, order);
}

}  // namespace braid::parallel
