// Algorithm selection (src/comm/select.cc): which all-reduce the cost model
// picks, and where the chain all-reduce applies.
#include <gtest/gtest.h>

#include <limits>

#include "braid/error.h"
#include "comm/select.h"

using namespace braid;
using namespace braid::comm;

namespace {

constexpr size_t k16M = size_t(16) << 20;

TEST(Select, ChainWhenEveryPeerSharesMemoryAndRanksOutnumberCores) {
  Selector s(8, /*any_tcp=*/false, CostParams{}, /*hosts=*/1, /*max_local=*/8,
             /*all_shm=*/true, /*cores=*/2);
  EXPECT_EQ(s.choose(CollOp::kAllReduce, k16M, DType::kF32), "chain");
  EXPECT_EQ(s.choose(CollOp::kAllReduce, size_t(4) << 20, DType::kI32), "chain");
  // Small messages stay with the latency-bound schedules.
  EXPECT_NE(s.choose(CollOp::kAllReduce, 64, DType::kF32), "chain");
  // f16/bf16 beyond two ranks keep the rank-order fold that accumulates in f32.
  EXPECT_EQ(s.choose(CollOp::kAllReduce, k16M, DType::kBF16), "direct");
}

TEST(Select, NoChainWithoutSharedMemoryEverywhere) {
  Selector tcp(8, /*any_tcp=*/true, CostParams{}, 1, 8, /*all_shm=*/true, /*cores=*/2);
  EXPECT_NE(tcp.choose(CollOp::kAllReduce, k16M, DType::kF32), "chain");
  EXPECT_EQ(tcp.predict(CollOp::kAllReduce, "chain", k16M),
            std::numeric_limits<double>::infinity());
  Selector mixed(8, false, CostParams{}, 1, 8, /*all_shm=*/false, /*cores=*/2);
  EXPECT_NE(mixed.choose(CollOp::kAllReduce, k16M, DType::kF32), "chain");
}

TEST(Select, TwoRanksWithACoreEachKeepTheRing) {
  Selector s(2, false, CostParams{}, 1, 2, /*all_shm=*/true, /*cores=*/2);
  EXPECT_EQ(s.choose(CollOp::kAllReduce, k16M, DType::kF32), "ring");
  EXPECT_LT(s.predict(CollOp::kAllReduce, "ring", k16M),
            s.predict(CollOp::kAllReduce, "chain", k16M));
}

TEST(Select, ChainCanBeForcedAndUnknownNamesAreRejected) {
  Selector s(4, false, CostParams{}, 1, 4, true, /*cores=*/2);
  s.set_override("all_reduce", "chain");
  EXPECT_EQ(s.choose(CollOp::kAllReduce, 8, DType::kF32), "chain");
  EXPECT_THROW(s.set_override("all_reduce", "bogus"), Error);
  EXPECT_THROW(s.set_override("all_gather", "chain"), Error);
}

}  // namespace
