// Row-wise SGD and Adagrad (braid/row_optimizer.h) against the formulas
// worked by hand, RowGrads' accumulation, and dlrm_table_init against the
// tables a Dlrm builds (the values a sharded table's blocks start from).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "braid/dlrm.h"
#include "braid/error.h"
#include "braid/row_optimizer.h"

using braid::nn::RowGrads;
using braid::nn::RowOptimizer;

TEST(RowOptimizer, RowGradsAddUpPerRowAndSortByRow) {
  RowGrads g(2);
  const float a[2] = {1, 2}, b[2] = {10, 20};
  g.add(7, a);
  g.add(3, b);
  g.add(7, b);
  EXPECT_EQ(g.size(), 2);
  std::vector<int64_t> rows;
  std::vector<const float*> grads;
  g.sorted(rows, grads);
  ASSERT_EQ(rows, (std::vector<int64_t>{3, 7}));
  EXPECT_EQ(grads[0][1], 20.0f);
  EXPECT_EQ(grads[1][0], 11.0f);
  EXPECT_EQ(grads[1][1], 22.0f);
  g.clear();
  EXPECT_EQ(g.size(), 0);
}

TEST(RowOptimizer, SgdMovesOnlyTheTouchedRows) {
  std::vector<float> w = {1, 1, 2, 2, 3, 3};  // 3 rows of 2
  const float g[2] = {0.5f, -1};
  const float* gp[1] = {g};
  const int64_t rows[1] = {1};
  RowOptimizer::parse("sgd").update(w.data(), 2, nullptr, rows, gp, nullptr, 1, 2, 0.1f);
  EXPECT_EQ(w, (std::vector<float>{1, 1, 2 - 0.05f, 2 + 0.1f, 3, 3}));
}

TEST(RowOptimizer, AdagradKeepsOneAccumulatorPerRow) {
  std::vector<float> w = {1, 1, 2, 2};
  std::vector<float> s = {0, 0};
  const float g[2] = {3, 4};  // Σ g² = 25, mean over width 2: 12.5
  const float* gp[1] = {g};
  const int64_t rows[1] = {0};
  const RowOptimizer opt = RowOptimizer::parse("adagrad");
  ASSERT_TRUE(opt.has_state());
  for (int step = 1; step <= 2; ++step) {
    const std::vector<float> before = w;
    opt.update(w.data(), 2, s.data(), rows, gp, nullptr, 1, 2, 0.5f);
    EXPECT_FLOAT_EQ(s[0], 12.5f * float(step));
    const float mult = 0.5f / (std::sqrt(12.5f * float(step)) + 1e-8f);
    EXPECT_FLOAT_EQ(w[0], before[0] - mult * 3);
    EXPECT_FLOAT_EQ(w[1], before[1] - mult * 4);
    EXPECT_EQ(w[2], 2.0f);  // row 1 untouched, its state too
    EXPECT_EQ(s[1], 0.0f);
  }
  // A column shard (width 1 of 2) given the full row's square sum moves as
  // the whole row's column does.
  std::vector<float> half = {1};
  std::vector<float> hs = {0};
  const double sq[1] = {25};
  opt.update(half.data(), 1, hs.data(), rows, gp, sq, 1, 2, 0.5f);
  EXPECT_FLOAT_EQ(hs[0], 12.5f);
  EXPECT_FLOAT_EQ(half[0], 1 - 0.5f / (std::sqrt(12.5f) + 1e-8f) * 3);
  EXPECT_THROW(RowOptimizer::parse("adam"), braid::Error);
}

TEST(RowOptimizer, TableInitBlocksAreTheDlrmsTables) {
  braid::nn::DlrmConfig c;
  c.rows = {50, 30};
  c.dim = 6;
  braid::nn::Dlrm d("dlrm", c, 7);
  for (int64_t f = 0; f < 2; ++f) {
    const float* w = d.table(f).weight().data.f32();
    // Rows [4, 9), columns [2, 5).
    std::vector<float> block(5 * 3);
    braid::nn::dlrm_table_init(c, 7, f, 4, 9, 2, 5, block.data());
    for (int64_t r = 0; r < 5; ++r)
      for (int64_t k = 0; k < 3; ++k)
        EXPECT_EQ(block[size_t(r * 3 + k)], w[(4 + r) * 6 + 2 + k]) << f << " " << r << " " << k;
  }
  std::vector<float> out(1);
  EXPECT_THROW(braid::nn::dlrm_table_init(c, 7, 2, 0, 1, 0, 1, out.data()), braid::Error);
  EXPECT_THROW(braid::nn::dlrm_table_init(c, 7, 1, 0, 31, 0, 1, out.data()), braid::Error);
}
