// The device mesh on 8 real processes as dp=2 × pp=2 × tp=2: each axis'
// communicator holds exactly the world ranks the layout names (tp
// consecutive, dp outermost), in coordinate order, and works; the layout
// text lists the same groups; a product other than the world size, or a
// size below 1, is refused by name.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "braid/comm.h"
#include "braid/mesh.h"
#include "support/multiproc.h"

namespace braid::parallel {
namespace {

std::vector<int> members(Communicator& c, int world_rank) {
  std::vector<int> all(size_t(c.size()));
  c.all_gather(&world_rank, all.data(), 1, DType::kI32);
  return all;
}

TEST(Mesh, GroupsFollowTheLayout) {
  testing::expect_all_pass(8, [&](int rank, int n, std::shared_ptr<Store> store) {
    auto world = testing::make_comm(rank, n, store);
    Mesh m(world, 2, 2, 2);
    const MeshCoord& k = m.coord();
    EXPECT_EQ(k.tp, rank % 2);
    EXPECT_EQ(k.pp, (rank / 2) % 2);
    EXPECT_EQ(k.dp, rank / 4);
    EXPECT_EQ(m.rank_of(k), rank);
    EXPECT_EQ(m.tp()->rank(), k.tp);
    EXPECT_EQ(m.pp()->rank(), k.pp);
    EXPECT_EQ(m.dp()->rank(), k.dp);
    // tp: consecutive ranks; pp: stride tp; dp: stride tp·pp.
    const int base_tp = rank - k.tp, base_pp = rank - 2 * k.pp, base_dp = rank - 4 * k.dp;
    EXPECT_EQ(members(*m.tp(), rank), (std::vector<int>{base_tp, base_tp + 1}));
    EXPECT_EQ(members(*m.pp(), rank), (std::vector<int>{base_pp, base_pp + 2}));
    EXPECT_EQ(members(*m.dp(), rank), (std::vector<int>{base_dp, base_dp + 4}));
    const std::string d = m.describe();
    EXPECT_NE(d.find("dp=2 x pp=2 x tp=2 over 8 ranks"), std::string::npos) << d;
    EXPECT_NE(d.find("tp groups: [0 1] [2 3] [4 5] [6 7]"), std::string::npos) << d;
    EXPECT_NE(d.find("pp groups: [0 2] [1 3] [4 6] [5 7]"), std::string::npos) << d;
    EXPECT_NE(d.find("dp groups: [0 4] [1 5] [2 6] [3 7]"), std::string::npos) << d;
  }, std::chrono::seconds(180));
}

// The layout rule without ranks (what --print-schedule prints): tp
// innermost, then pp, then dp, and coord_at its inverse.
TEST(Mesh, LayoutRuleNeedsNoRanks) {
  const int tp = 2, pp = 3, dp = 4;
  for (int r = 0; r < dp * pp * tp; ++r) {
    const MeshCoord c = Mesh::coord_at(r, tp, pp);
    EXPECT_EQ(c.tp, r % tp) << r;
    EXPECT_EQ(c.pp, (r / tp) % pp) << r;
    EXPECT_EQ(c.dp, r / (tp * pp)) << r;
    EXPECT_EQ(Mesh::rank_at(c, tp, pp), r);
  }
  EXPECT_EQ(Mesh::rank_at({1, 2, 1}, tp, pp), 11);  // dp 1, pp 2, tp 1
}

TEST(Mesh, BadProductIsRefused) {
  testing::expect_all_pass(4, [&](int rank, int n, std::shared_ptr<Store> store) {
    auto world = testing::make_comm(rank, n, store);
    try {
      Mesh m(world, 2, 3, 1);
      ADD_FAILURE() << "dp=2 x tp=3 accepted on 4 ranks";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("= 6 ranks, but the world has 4"), std::string::npos)
          << e.what();
    }
    try {
      Mesh m(world, 4, 0, 1);
      ADD_FAILURE() << "tp=0 accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("tp=0"), std::string::npos) << e.what();
    }
    // Refused before any split: the world is still in step.
    Mesh ok(world, 1, 4);
    EXPECT_EQ(ok.tp()->size(), 4);
    EXPECT_EQ(ok.dp()->size(), 1);
  });
}

}  // namespace
}  // namespace braid::parallel
