// parallel::ShardedTables in real processes (tests/support/multiproc.h):
// mean-pooled bags with padding over 3 ranks, sharded table-, row- and
// column-wise, give each rank the pooled bags one process computes for its
// samples, and one backward plus a row-wise Adagrad step leaves the tables
// and their row state as in one process (nn::EmbeddingBag's sparse
// gradient, nn::RowOptimizer over the whole table).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "braid/checkpoint.h"
#include "braid/comm.h"
#include "braid/error.h"
#include "braid/layers.h"
#include "braid/rng.h"
#include "braid/sharded_embeddings.h"
#include "support/multiproc.h"

namespace {

using braid::Tensor;

constexpr int kWorld = 3;
constexpr int64_t kBatch = 9, kBag = 3;

braid::nn::DlrmConfig config() {
  braid::nn::DlrmConfig c;
  c.rows = {40, 7};
  c.dim = 6;
  c.bag = kBag;
  c.mode = braid::nn::EmbeddingBag::Mode::kMean;
  return c;
}

// Feature f's ids of the global batch, [kBatch, kBag]: some padding, one
// bag of padding only, repeated ids.
Tensor global_ids(const braid::nn::DlrmConfig& c, int64_t f, int64_t draw = 0) {
  Tensor t({kBatch, kBag}, braid::DType::kI32);
  braid::CounterRng rng(uint64_t(100 + f + 10 * draw));
  for (int64_t i = 0; i < t.numel(); ++i)
    t.i32()[i] = rng.uniform() < 0.2f ? -1 : int32_t(rng.below(uint64_t(c.rows[size_t(f)])));
  for (int64_t j = 0; j < kBag; ++j) t.i32()[4 * kBag + j] = -1;
  t.i32()[kBag] = t.i32()[0];
  return t;
}

Tensor rows_of(const Tensor& t, int64_t begin, int64_t end) {
  Tensor out({end - begin, t.dim(1)}, t.dtype());
  std::memcpy(out.raw(), static_cast<const char*>(t.raw()) + begin * t.dim(1) * 4,
              size_t((end - begin) * t.dim(1)) * 4);
  return out;
}

Tensor global_dpooled(int64_t f, int64_t dim) {
  Tensor t({kBatch, dim});
  braid::CounterRng rng(uint64_t(200 + f));
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = rng.uniform() - 0.5f;
  return t;
}

void check(const std::string& shard) {
  braid::testing::expect_all_pass(kWorld, [&](int rank, int n, std::shared_ptr<braid::Store> store) {
    const braid::nn::DlrmConfig c = config();
    auto comm = braid::testing::make_comm(rank, n, store);
    braid::parallel::EmbeddingPlanOptions po;
    po.shard = shard;
    po.row_state = true;
    const auto plan = braid::parallel::plan_embeddings(c, n, po);
    const braid::nn::RowOptimizer opt = braid::nn::RowOptimizer::parse("adagrad");
    braid::parallel::ShardedTables tables(comm, c, 5, plan, opt);
    const int64_t b0 = rank * kBatch / n, b1 = (rank + 1) * kBatch / n;
    std::vector<Tensor> ids, dpooled;
    for (int64_t f = 0; f < 2; ++f) {
      ids.push_back(rows_of(global_ids(c, f), b0, b1));
      dpooled.push_back(rows_of(global_dpooled(f, c.dim), b0, b1));
    }
    braid::nn::Context ctx;
    std::vector<const Tensor*> pooled(2);
    tables.forward(ids, pooled, ctx);
    tables.begin_step();
    tables.backward(dpooled, ctx);
    tables.apply(0.1f);
    braid::Checkpoint ck;
    tables.add_state(ck);

    // One process: an EmbeddingBag per table, its sparse gradient, the
    // row-wise update of the whole table.
    for (int64_t f = 0; f < 2; ++f) {
      const int64_t rows = c.rows[size_t(f)];
      braid::nn::EmbeddingBag bag("emb", rows, c.dim, c.mode);
      braid::nn::dlrm_table_init(c, 5, f, 0, rows, 0, c.dim, bag.weight().data.f32());
      const Tensor all = global_ids(c, f);
      const Tensor& y = bag.forward(all, ctx);
      for (int64_t i = b0; i < b1; ++i)
        for (int64_t k = 0; k < c.dim; ++k)
          EXPECT_NEAR(pooled[size_t(f)]->f32()[(i - b0) * c.dim + k], y.f32()[i * c.dim + k], 1e-6)
              << shard << ": table " << f << " sample " << i;
      bag.set_dense_grad(false);
      bag.backward(global_dpooled(f, c.dim), ctx);
      std::vector<const float*> g;
      for (size_t u = 0; u < bag.touched_rows().size(); ++u)
        g.push_back(bag.row_grads().f32() + int64_t(u) * c.dim);
      std::vector<float> state(size_t(rows), 0.0f);
      opt.update(bag.weight().data.f32(), c.dim, state.data(), bag.touched_rows().data(), g.data(),
                 nullptr, int64_t(g.size()), c.dim, 0.1f);
      if (rank != 0) continue;
      const std::string name = "emb." + std::to_string(f) + ".weight";
      const Tensor& w = ck.tensors.at("model/" + name);
      const Tensor& s = ck.tensors.at("optim/" + name + "/rowwise_sum");
      for (int64_t i = 0; i < rows * c.dim; ++i)
        ASSERT_NEAR(w.f32()[i], bag.weight().data.f32()[i], 1e-6) << shard << ": " << name << " " << i;
      for (int64_t r = 0; r < rows; ++r)
        ASSERT_NEAR(s.f32()[r], state[size_t(r)], 1e-6 * (1 + state[size_t(r)])) << shard << " row " << r;
    }
    // The tables' own share: this rank's bytes.
    EXPECT_EQ(tables.table_bytes(), plan.rank_bytes(rank) - tables.state_bytes());
  });
}

}  // namespace

TEST(ShardedEmbeddings, TableWiseMatchesOneProcess) { check("table"); }
TEST(ShardedEmbeddings, RowWiseMatchesOneProcess) { check("row"); }
TEST(ShardedEmbeddings, ColumnWiseMatchesOneProcess) { check("column"); }

TEST(ShardedEmbeddings, AnIdOutsideItsTableIsRefusedBeforeItIsSent) {
  braid::testing::expect_all_pass(1, [](int rank, int n, std::shared_ptr<braid::Store> store) {
    const braid::nn::DlrmConfig c = config();
    auto comm = braid::testing::make_comm(rank, n, store);
    braid::parallel::ShardedTables tables(comm, c, 5,
                                          braid::parallel::plan_embeddings(c, 1, {}),
                                          braid::nn::RowOptimizer());
    std::vector<Tensor> ids = {global_ids(c, 0), global_ids(c, 1)};
    ids[1].i32()[2] = 7;  // table 1 has 7 rows
    braid::nn::Context ctx;
    std::vector<const Tensor*> pooled(2);
    try {
      tables.forward(ids, pooled, ctx);
      ADD_FAILURE() << "no error";
    } catch (const braid::Error& e) {
      EXPECT_NE(std::string(e.what()).find("feature 1 holds id 7 outside [0, 7)"), std::string::npos)
          << e.what();
    }
  });
}

// Ids announced before a backward (prefetch) ride with its gradients; the
// next training forward then sends none and pools what the plain exchange
// pools. A forward with other ids than the announced ones is an error.
TEST(ShardedEmbeddings, PrefetchedIdsPoolAsSentOnes) {
  braid::testing::expect_all_pass(2, [](int rank, int n, std::shared_ptr<braid::Store> store) {
    braid::nn::DlrmConfig c = config();
    c.mode = braid::nn::EmbeddingBag::Mode::kSum;
    auto comm = braid::testing::make_comm(rank, n, store);
    braid::parallel::EmbeddingPlanOptions po;
    po.shard = "row";
    const auto plan = braid::parallel::plan_embeddings(c, n, po);
    const int64_t b0 = rank * 8 / n, b1 = (rank + 1) * 8 / n;
    auto batch = [&](int64_t step) {  // rows [b0, b1) of global batch `step`
      std::vector<Tensor> ids;
      for (int64_t f = 0; f < 2; ++f) ids.push_back(rows_of(global_ids(c, f, step), b0, b1));
      return ids;
    };
    std::vector<Tensor> dpooled;
    for (int64_t f = 0; f < 2; ++f) dpooled.push_back(rows_of(global_dpooled(f, c.dim), b0, b1));
    // Two steps, with and without the second step's ids announced.
    std::vector<std::vector<float>> second[2];
    for (int pre = 0; pre < 2; ++pre) {
      braid::parallel::ShardedTables t(comm, c, 5, plan, braid::nn::RowOptimizer());
      t.set_batches({b1 - b0, 8 - (b1 - b0)});
      braid::nn::Context ctx;
      std::vector<const Tensor*> pooled(2);
      t.begin_step();
      t.forward(batch(0), pooled, ctx);
      if (pre) t.prefetch(batch(1));
      t.backward(dpooled, ctx);
      t.apply(0.5f);
      if (pre) {
        // An evaluation forward in between leaves the announced ids be.
        braid::nn::Context eval;
        eval.training = false;
        t.forward(batch(3), pooled, eval);
      }
      t.forward(batch(1), pooled, ctx);
      for (int64_t f = 0; f < 2; ++f)
        second[pre].emplace_back(pooled[size_t(f)]->f32(),
                                 pooled[size_t(f)]->f32() + pooled[size_t(f)]->numel());
    }
    EXPECT_EQ(second[0], second[1]);
    // Announced ids that the forward does not bring.
    braid::parallel::ShardedTables t(comm, c, 5, plan, braid::nn::RowOptimizer());
    t.set_batches({b1 - b0, 8 - (b1 - b0)});
    braid::nn::Context ctx;
    std::vector<const Tensor*> pooled(2);
    t.forward(batch(0), pooled, ctx);
    t.prefetch(batch(1));
    t.backward(dpooled, ctx);
    try {
      t.forward(batch(2), pooled, ctx);
      ADD_FAILURE() << "no error";
    } catch (const braid::Error& e) {
      EXPECT_EQ(e.code(), braid::Errc::kInternal);
      EXPECT_NE(std::string(e.what()).find("not the ones prefetched"), std::string::npos);
    }
  });
}
