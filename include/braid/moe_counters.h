// nn::MoeCounts — what the MoE layers (moe.h) of this process routed in
// training since the counters were last taken: the per-expert token
// counts, the dropped choices, the auxiliary loss, the time spent in the
// expert-parallel exchanges and the shadow experts run (moe_shadow.h).
// `braid train gpt` takes them once per step for its log.
//
// Process-wide: every MoeLayer (a pipeline's activation-slot copies
// included) adds to one set of counters under a mutex, so whoever reports
// need not find the layers. Counts are this rank's tokens only; a job
// sums them over its data-parallel ranks. Routing is counted by a layer's
// backward, once per trained micro-batch however often its forward ran
// (recomputation routes the same way); forwards without a backward
// (evaluation, a pipeline learning its shapes) are not counted. Exchange
// time is counted wherever an exchange runs, recomputed forwards included.
#pragma once

#include <cstdint>
#include <vector>

namespace braid::nn {

struct MoeCounts {
  std::vector<int64_t> tokens;  // [E] choices kept per expert (global index), summed over layers
  int64_t routed = 0;           // choices made (tokens · top_k), over layers
  int64_t dropped = 0;          // choices dropped at capacity
  double aux_sum = 0;           // Σ over layers and groups of aux_b
  int64_t groups = 0;           // groups (layer × sequence) behind aux_sum
  double exchange_s = 0;        // seconds in the expert-parallel all_to_alls, forward and backward
  int64_t forwards = 0;         // MoE layer micro-batches counted
  int64_t shadows = 0;          // shadows run (moe_shadow.h), over layers and micro-batches
  double aux_mean() const { return groups > 0 ? aux_sum / double(groups) : 0.0; }
};

// Adds to the process's counters (the layers call these).
void moe_count_routing(const std::vector<int64_t>& per_expert, int64_t routed, int64_t dropped,
                       double aux_sum, int64_t groups);
void moe_count_exchange(double seconds);
void moe_count_shadows(int64_t shadows);  // counted with the routing, by backward
// The counters since the last take, and zeroes them.
MoeCounts moe_take_counts();

}  // namespace braid::nn
