// parallel::plan_embeddings: where table-, row- and column-wise sharding
// put each table, what --shard auto picks, and the plans it refuses.
#include <gtest/gtest.h>

#include <string>

#include "braid/embedding_plan.h"
#include "braid/error.h"

namespace {

using braid::parallel::EmbeddingPlanOptions;
using braid::parallel::plan_embeddings;
using braid::parallel::TableSharding;

braid::nn::DlrmConfig tables(std::vector<int64_t> rows, int64_t dim) {
  braid::nn::DlrmConfig c;
  c.rows = std::move(rows);
  c.dim = dim;
  return c;
}

EmbeddingPlanOptions mode(const std::string& m, int64_t limit = 0, bool state = false) {
  EmbeddingPlanOptions o;
  o.shard = m;
  o.memory_limit_bytes = limit;
  o.row_state = state;
  return o;
}

std::string error_of(const braid::nn::DlrmConfig& c, int world, const EmbeddingPlanOptions& o) {
  try {
    plan_embeddings(c, world, o);
  } catch (const braid::Error& e) {
    EXPECT_EQ(e.code(), braid::Errc::kInvalidArgument);
    return e.what();
  }
  return "";
}

}  // namespace

TEST(EmbeddingPlan, TableWisePutsTheLargestFirstOnTheLeastLoadedRank) {
  const auto p = plan_embeddings(tables({100, 400, 200, 300}, 8), 2, mode("table"));
  ASSERT_EQ(p.tables.size(), 4u);
  // 400 → rank 0, 300 → rank 1, 200 → rank 1 (300 < 400), 100 → rank 0.
  EXPECT_EQ(p.tables[1].shards[0].rank, 0);
  EXPECT_EQ(p.tables[3].shards[0].rank, 1);
  EXPECT_EQ(p.tables[2].shards[0].rank, 1);
  EXPECT_EQ(p.tables[0].shards[0].rank, 0);
  for (const auto& t : p.tables) {
    EXPECT_EQ(t.kind, TableSharding::kTable);
    ASSERT_EQ(t.shards.size(), 1u);
    EXPECT_EQ(t.shards[0].cols(), 8);
  }
  EXPECT_EQ(p.rank_bytes(0), 500 * 8 * 4);
  EXPECT_EQ(p.rank_bytes(1), 500 * 8 * 4);
  EXPECT_EQ(p.total_bytes(), 1000 * 8 * 4);
}

TEST(EmbeddingPlan, RowAndColumnWiseSplitEveryTableOverEveryRank) {
  const auto rows = plan_embeddings(tables({10, 7}, 6), 3, mode("row", 0, true));
  ASSERT_EQ(rows.tables[1].shards.size(), 3u);
  // 7 rows over 3 ranks: [0, 2), [2, 4), [4, 7).
  EXPECT_EQ(rows.tables[1].shards[0].row_end, 2);
  EXPECT_EQ(rows.tables[1].shards[1].row_begin, 2);
  EXPECT_EQ(rows.tables[1].shards[2].row_end, 7);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(rows.tables[1].shards[size_t(r)].rank, r);
  // Row state, 4 bytes a row, goes with the rows.
  EXPECT_EQ(rows.total_bytes(), 17 * 6 * 4 + 17 * 4);
  const auto cols = plan_embeddings(tables({10, 7}, 6), 3, mode("column", 0, true));
  EXPECT_EQ(cols.tables[0].kind, TableSharding::kColumn);
  EXPECT_EQ(cols.tables[0].shards[2].col_begin, 4);
  EXPECT_EQ(cols.tables[0].shards[2].col_end, 6);
  EXPECT_EQ(cols.tables[0].shards[2].rows(), 10);
  // Each column shard keeps the whole table's row state.
  EXPECT_EQ(cols.total_bytes(), 17 * 6 * 4 + 3 * 17 * 4);
}

TEST(EmbeddingPlan, AutoPlacesWholeTablesWhileBalancedAndSplitsTheRest) {
  // 8 equal tables over 2 ranks: 4 whole tables each.
  const auto two = plan_embeddings(tables(std::vector<int64_t>(8, 1000), 12), 2, mode("auto"));
  for (const auto& t : two.tables) EXPECT_EQ(t.kind, TableSharding::kTable);
  EXPECT_EQ(two.rank_bytes(0), two.rank_bytes(1));
  // Over 3 ranks whole tables cannot balance: 6 placed whole, the last 2
  // split column-wise (12 divides by 3), each rank 8/3 tables' bytes.
  const auto three = plan_embeddings(tables(std::vector<int64_t>(8, 1000), 12), 3, mode("auto"));
  int whole = 0, column = 0;
  for (const auto& t : three.tables) {
    whole += t.kind == TableSharding::kTable;
    column += t.kind == TableSharding::kColumn;
  }
  EXPECT_EQ(whole, 6);
  EXPECT_EQ(column, 2);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(three.rank_bytes(r), three.total_bytes() / 3);
  // A width that does not divide: the split is row-wise.
  const auto rows = plan_embeddings(tables(std::vector<int64_t>(8, 1000), 10), 3, mode("auto"));
  int row = 0;
  for (const auto& t : rows.tables) row += t.kind == TableSharding::kRow;
  EXPECT_EQ(row, 2);
  // One table much larger than the rest is split; the small ones stay whole.
  const auto big = plan_embeddings(tables({100000, 100, 100, 100}, 8), 2, mode("auto"));
  EXPECT_EQ(big.tables[0].kind, TableSharding::kColumn);
  for (size_t f = 1; f < 4; ++f) EXPECT_EQ(big.tables[f].kind, TableSharding::kTable);
  EXPECT_NE(big.describe().find("table 0 [100000 x 8"), std::string::npos) << big.describe();
}

TEST(EmbeddingPlan, RefusesPlansThatCannotBe) {
  EXPECT_NE(error_of(tables({10}, 10), 3, mode("column")).find("does not divide into 3"),
            std::string::npos);
  EXPECT_NE(error_of(tables({2}, 8), 3, mode("row")).find("fewer than the 3 ranks"),
            std::string::npos);
  EXPECT_NE(error_of(tables({10}, 8), 2, mode("diagonal")).find("--shard 'diagonal'"),
            std::string::npos);
  // 4 tables of 1000 x 16 (62.5 KiB each) over 2 ranks: 125 KiB a rank.
  const auto c = tables({1000, 1000, 1000, 1000}, 16);
  const std::string over = error_of(c, 2, mode("table", 100 * 1024));
  EXPECT_NE(over.find("over the limit"), std::string::npos) << over;
  EXPECT_NE(over.find("rank 0"), std::string::npos) << over;
  EXPECT_EQ(error_of(c, 2, mode("table", 125 * 1024)), "");
  EXPECT_NE(error_of(c, 1, mode("auto", 125 * 1024)).find("--table-memory-limit"),
            std::string::npos);
}
