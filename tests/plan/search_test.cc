// The search keeps what is fixed, returns only layouts that fit, best
// first, and plans data parallelism alone for models other than the GPT.
#include <gtest/gtest.h>

#include "braid/error.h"
#include "braid/plan_search.h"

namespace {

using namespace braid;

TEST(PlanSearch, RespectsFixedChoicesAndMemory) {
  const plan::Cluster c = plan::cluster_preset("dgx-a100");
  const plan::ModelDesc m = plan::parse_model("gpt-18b");
  plan::SearchSpec s;
  s.devices = 64;
  s.batch = 256;
  const plan::SearchResult all = plan::search(m, c, s);
  ASSERT_FALSE(all.fits.empty());
  EXPECT_GT(all.too_big, 0u);  // 18B on one device does not fit
  for (size_t i = 0; i < all.fits.size(); ++i) {
    EXPECT_LE(all.fits[i].memory.total(), c.device.memory_bytes);
    if (i) {
      EXPECT_LE(all.fits[i - 1].step_s, all.fits[i].step_s);
    }
  }
  s.tp = 4;
  s.pp = 4;
  s.schedule = "interleaved";
  s.recompute = plan::Recompute::kSelective;
  s.zero = 1;
  const plan::SearchResult fixed = plan::search(m, c, s);
  ASSERT_FALSE(fixed.fits.empty());
  for (const plan::Estimate& e : fixed.fits) {
    EXPECT_EQ(e.layout.tp, 4);
    EXPECT_EQ(e.layout.pp, 4);
    EXPECT_EQ(e.layout.dp, 4);
    EXPECT_EQ(e.layout.schedule, "interleaved");
    EXPECT_GE(e.layout.virtual_stages, 2);
    EXPECT_EQ(e.layout.recompute, plan::Recompute::kSelective);
    EXPECT_EQ(e.layout.zero, 1);
  }
  EXPECT_LT(fixed.considered, all.considered);
  EXPECT_GE(fixed.fits.front().step_s, all.fits.front().step_s);
  s = {};
  s.devices = 64;
  s.batch = 256;
  s.tp = 3;
  EXPECT_THROW(plan::search(m, c, s), Error);
  s.tp = {};
  s.schedule = "zigzag";
  EXPECT_THROW(plan::search(m, c, s), Error);
  // One stage runs every schedule alike: the name asked for is kept.
  s.schedule = "gpipe";
  s.pp = 1;
  const plan::SearchResult one = plan::search(m, c, s);
  for (const plan::Estimate& e : one.fits) EXPECT_EQ(e.layout.schedule, "gpipe");
}

TEST(PlanSearch, NothingFitsSaysHowMuchTheSmallestNeeds) {
  plan::Cluster c = plan::cluster_preset("dgx-a100");
  c.device.memory_bytes = 1e9;
  plan::SearchSpec s;
  s.devices = 8;
  s.batch = 8;
  const plan::SearchResult r = plan::search(plan::parse_model("gpt-18b"), c, s);
  EXPECT_TRUE(r.fits.empty());
  EXPECT_GT(r.smallest_overflow_bytes, 1e9);
}

TEST(PlanSearch, OtherModelsPlanDataParallelOnly) {
  plan::SearchSpec s;
  s.devices = 4;
  s.batch = 512;
  const plan::SearchResult r =
      plan::search(plan::parse_model("mlp:784,256,10"), plan::cluster_preset("eth-cpu"), s);
  ASSERT_FALSE(r.fits.empty());
  for (const plan::Estimate& e : r.fits) {
    EXPECT_EQ(e.layout.tp, 1);
    EXPECT_EQ(e.layout.pp, 1);
    EXPECT_EQ(e.layout.dp, 4);
  }
  EXPECT_FALSE(plan::why_wins(r.fits[0], r.fits[1]).empty());
}

}  // namespace
