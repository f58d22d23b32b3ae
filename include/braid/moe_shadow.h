// Shadow experts: how an expert-parallel MoE layer (moe.h) evens out its
// ranks' expert compute when routing is skewed, after FasterMoE's dynamic
// shadowing (He et al., PPoPP 2022).
//
// Without shadows, ep rank r runs its experts on every row routed to them
// from the whole group, so a popular expert makes its rank the slowest one
// and the others wait in the all_to_all. A shadowed expert e is lent
// instead: its rank sends e's weights to the group's other ranks, each
// rank runs e on its own rows for e (they never leave home), and the
// gradients of those copies go back to e's rank, which adds them to its
// own in rank order before the expert's gradient is marked ready. Rows
// are the same and the weights are the same, so outputs and gradients are
// the serial model's up to the order of float sums.
//
// The plan (plan_shadows) is a function of every rank's per-expert row
// counts alone, so each rank of the group computes the same plan from the
// same all-gathered counts. Load of rank r = rows of its experts that are
// not shadowed (from every rank) + its own rows for the shadowed experts
// it does not hold. Greedily: take the most loaded rank (lowest index on
// ties); shadow its unshadowed expert with the most rows from other ranks
// (lowest index on ties); keep that while it lowers the group's largest
// load by at least `min_gain` rows, else undo it and stop. The cost of a
// shadow, its weights out and its gradients back, is what `min_gain`
// stands for.
//
// Errors: Error(kInvalidArgument) when counts is not ranks · experts long,
// ranks < 1 or experts not divisible by ranks.
#pragma once

#include <cstdint>
#include <vector>

namespace braid::nn {

struct ShadowPlan {
  std::vector<char> shadowed;  // [E] 1: expert e runs on every rank for that rank's own rows
  std::vector<int64_t> load;   // [ranks] expert rows each rank runs under the plan
  int64_t count() const;       // experts shadowed
};

// counts[s · experts + e]: rows rank s routes to expert e. Rank r holds
// experts [r·E/ranks, (r+1)·E/ranks).
ShadowPlan plan_shadows(const std::vector<int64_t>& counts, int ranks, int64_t experts,
                        int64_t min_gain);

}  // namespace braid::nn
