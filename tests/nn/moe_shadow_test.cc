// nn::plan_shadows (moe_shadow.h): which experts a skewed expert-parallel
// group lends, and the loads that leaves.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "braid/error.h"
#include "braid/moe_shadow.h"

namespace {

using braid::nn::plan_shadows;
using braid::nn::ShadowPlan;

// Rows each rank runs under `shadowed`, counted directly.
std::vector<int64_t> loads(const std::vector<int64_t>& counts, const std::vector<char>& shadowed,
                           int ranks, int64_t experts) {
  std::vector<int64_t> load(size_t(ranks), 0);
  for (int s = 0; s < ranks; ++s)
    for (int64_t e = 0; e < experts; ++e)
      load[size_t(shadowed[size_t(e)] ? s : int(e / (experts / ranks)))] +=
          counts[size_t(s * experts + e)];
  return load;
}

}  // namespace

TEST(MoeShadow, OnePopularExpertIsLent) {
  // Both ranks send 100 rows to expert 0 (rank 0's): rank 0 runs 200, rank
  // 1 none. Lending expert 0 leaves 100 each; nothing else helps.
  const std::vector<int64_t> counts = {100, 0, 0, 0, 100, 0, 0, 0};
  const ShadowPlan p = plan_shadows(counts, 2, 4, 1);
  EXPECT_EQ(p.shadowed, (std::vector<char>{1, 0, 0, 0}));
  EXPECT_EQ(p.load, (std::vector<int64_t>{100, 100}));
  EXPECT_EQ(p.count(), 1);
}

TEST(MoeShadow, TheMostRemoteRowsGoFirstAndTheGainMustPay) {
  // Rank 1 holds experts 2, 3 and runs 30 + 50 + 10 + 40 = 130 rows, rank 0
  // runs 20. Expert 2 has 50 remote rows, expert 3 30: lend 2 first (rank
  // 1: 80 left, rank 0: 70), then 3 would leave 70 / 40 + 30 = 70: no gain.
  const std::vector<int64_t> counts = {10, 0, 50, 30, 10, 0, 10, 40};
  const ShadowPlan p = plan_shadows(counts, 2, 4, 1);
  EXPECT_EQ(p.shadowed, (std::vector<char>{0, 0, 1, 0}));
  EXPECT_EQ(p.load, (std::vector<int64_t>{70, 80}));
  // A gain of 50 rows is below a threshold of 51: nothing lent.
  const ShadowPlan q = plan_shadows(counts, 2, 4, 51);
  EXPECT_EQ(q.count(), 0);
  EXPECT_EQ(q.load, (std::vector<int64_t>{20, 130}));
}

TEST(MoeShadow, BalancedOrAloneLendsNothing) {
  EXPECT_EQ(plan_shadows({5, 5, 5, 5, 5, 5, 5, 5}, 2, 4, 1).count(), 0);
  const ShadowPlan one = plan_shadows({7, 0, 3}, 1, 3, 1);
  EXPECT_EQ(one.count(), 0);
  EXPECT_EQ(one.load, (std::vector<int64_t>{10}));
}

TEST(MoeShadow, NeverRaisesTheLargestLoadAndReportsTheTrueLoads) {
  std::mt19937 rng(7);
  for (int ranks : {2, 3, 4})
    for (int trial = 0; trial < 200; ++trial) {
      const int64_t experts = ranks * (1 + trial % 3);
      std::vector<int64_t> counts(size_t(ranks * experts));
      // Skewed: most rows to a few experts.
      for (auto& c : counts) c = int64_t(rng() % 4 == 0 ? rng() % 500 : rng() % 20);
      const ShadowPlan p = plan_shadows(counts, ranks, experts, 1);
      const std::vector<char> none(size_t(experts), 0);
      const auto before = loads(counts, none, ranks, experts);
      EXPECT_EQ(p.load, loads(counts, p.shadowed, ranks, experts));
      EXPECT_LE(*std::max_element(p.load.begin(), p.load.end()),
                *std::max_element(before.begin(), before.end()));
      int64_t total = 0;
      for (int64_t l : p.load) total += l;
      int64_t rows = 0;
      for (int64_t c : counts) rows += c;
      EXPECT_EQ(total, rows) << "every row runs exactly once";
    }
}

TEST(MoeShadow, BadShapesAreNamed) {
  EXPECT_THROW(plan_shadows({1, 2, 3}, 2, 4, 1), braid::Error);
  EXPECT_THROW(plan_shadows({1, 2, 3}, 2, 3, 1), braid::Error);
  EXPECT_THROW(plan_shadows({}, 0, 4, 1), braid::Error);
}
