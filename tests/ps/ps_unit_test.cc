// Key partitioning and the server-side update rules, against hand
// computations and against braid::nn's optimizers (which BSP must equal).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "braid/error.h"
#include "braid/module.h"
#include "braid/optim.h"
#include "braid/ps.h"
#include "ps/shard/update_rule.h"

namespace {

using braid::ps::Layout;
using braid::ps::UpdateRule;

TEST(PsLayout, DenseKeysAreCutIntoContiguousEvenSlices) {
  Layout l(3);
  auto a = l.add_dense("w", 10);
  auto b = l.add_dense("b", 2, false);
  EXPECT_EQ(l.slice_begin(a, 0), 0);
  EXPECT_EQ(l.slice_end(a, 0), 3);   // 10·1/3
  EXPECT_EQ(l.slice_begin(a, 1), 3);
  EXPECT_EQ(l.slice_end(a, 1), 6);   // 10·2/3
  EXPECT_EQ(l.slice_end(a, 2), 10);
  EXPECT_EQ(l.slice_end(b, 0), 0);   // 2 elements over 3 servers: server 0 empty
  EXPECT_EQ(l.slice_end(b, 1), 1);
  EXPECT_EQ(l.slice_end(b, 2), 2);
  EXPECT_EQ(l.dense_elements_per_server(), (std::vector<int64_t>{3, 4, 5}));
  EXPECT_FALSE(l.key(b).decay);
}

TEST(PsLayout, SparseRowsSpreadOverEveryServer) {
  Layout l(4);
  l.add_sparse("emb", 1000, 8);
  std::vector<int> per(4, 0);
  for (int64_t r = 0; r < 1000; ++r) {
    int s = l.row_server(r);
    ASSERT_GE(s, 0);
    ASSERT_LT(s, 4);
    EXPECT_EQ(s, l.row_server(r));  // a pure function of the row
    ++per[size_t(s)];
  }
  for (int n : per) EXPECT_GT(n, 150);  // about 250 each; never all on one
  // The hottest (lowest) rows do not all land on one server.
  EXPECT_NE(l.row_server(0), l.row_server(1));
}

TEST(PsLayout, RejectsBadKeys) {
  Layout l(2);
  l.add_dense("w", 4);
  EXPECT_THROW(l.add_dense("w", 4), braid::Error);
  EXPECT_THROW(l.add_dense("x", 0), braid::Error);
  EXPECT_THROW(l.add_sparse("e", 10, 0), braid::Error);
  EXPECT_THROW(l.key(7), braid::Error);
  EXPECT_THROW(Layout(0), braid::Error);
  EXPECT_THROW(braid::ps::parse_consistency("eventual"), braid::Error);
  EXPECT_THROW(braid::ps::parse_update_rule("lamb"), braid::Error);
}

TEST(PsUpdateRule, SgdMomentumByHand) {
  UpdateRule r;
  r.kind = UpdateRule::kSgd;
  r.momentum = 0.5f;
  r.weight_decay = 0.1f;
  float w[1] = {2.0f}, g[1] = {1.0f}, buf[1] = {0.0f};
  // g' = 1 + 0.1·2 = 1.2; buf = 1.2; w = 2 − 0.1·1.2 = 1.88
  braid::ps::apply_update(r, w, g, buf, 1, 0.1f, 1, true);
  EXPECT_FLOAT_EQ(buf[0], 1.2f);
  EXPECT_FLOAT_EQ(w[0], 1.88f);
  // g' = 1 + 0.188 = 1.188; buf = 0.6 + 1.188 = 1.788; w = 1.88 − 0.1788
  braid::ps::apply_update(r, w, g, buf, 1, 0.1f, 2, true);
  EXPECT_FLOAT_EQ(buf[0], 1.788f);
  EXPECT_FLOAT_EQ(w[0], 1.7012f);
  // decay = false: no weight decay
  float w2[1] = {2.0f}, b2[1] = {0.0f};
  braid::ps::apply_update(r, w2, g, b2, 1, 0.1f, 1, false);
  EXPECT_FLOAT_EQ(w2[0], 1.9f);
}

TEST(PsUpdateRule, AdagradByHand) {
  UpdateRule r;
  r.kind = UpdateRule::kAdagrad;
  r.eps = 0;
  float w[2] = {1.0f, -1.0f}, g[2] = {3.0f, 4.0f}, h[2] = {0, 0};
  // h = g²; w −= lr·g/|g| = lr·sign(g)
  braid::ps::apply_update(r, w, g, h, 2, 0.5f, 1, true);
  EXPECT_FLOAT_EQ(h[0], 9.0f);
  EXPECT_FLOAT_EQ(h[1], 16.0f);
  EXPECT_FLOAT_EQ(w[0], 0.5f);
  EXPECT_FLOAT_EQ(w[1], -1.5f);
  // second: h = 9 + 9 = 18; w −= 0.5·3/√18
  braid::ps::apply_update(r, w, g, h, 2, 0.5f, 2, true);
  EXPECT_FLOAT_EQ(h[0], 18.0f);
  EXPECT_NEAR(w[0], 0.5f - 0.5f * 3.0f / std::sqrt(18.0f), 1e-6);
}

TEST(PsUpdateRule, AdamFirstStepByHand) {
  UpdateRule r;
  r.kind = UpdateRule::kAdamW;
  r.eps = 0;
  float w[1] = {1.0f}, g[1] = {0.25f}, mv[2] = {0, 0};
  // t = 1: m̂ = g, v̂ = g², so w −= lr·g/|g| = lr
  braid::ps::apply_update(r, w, g, mv, 1, 0.01f, 1, true);
  EXPECT_NEAR(mv[0], 0.1f * 0.25f, 1e-7);
  EXPECT_NEAR(mv[1], 0.001f * 0.0625f, 1e-9);
  EXPECT_NEAR(w[0], 0.99f, 1e-6);
}

// Several steps of each rule equal braid::nn's optimizer exactly: both run
// nn::sgd_update / nn::adamw_update. Plain SGD (no momentum) too, and a
// slice long enough that the loops split over threads.
TEST(PsUpdateRule, EqualsTheNnOptimizers) {
  for (int kind = 0; kind < 3; ++kind) {
    SCOPED_TRACE("kind " + std::to_string(kind));
    const int64_t n = kind == 2 ? (int64_t(1) << 18) + 3 : 5;
    braid::nn::Parameter p("p", {n});
    std::vector<float> w(static_cast<size_t>(n)), state(static_cast<size_t>(2 * n), 0.0f);
    for (int64_t i = 0; i < n; ++i) w[size_t(i)] = p.data.f32()[i] = 0.3f * float(i % 7) - 0.5f;
    UpdateRule r;
    std::unique_ptr<braid::nn::Optimizer> opt;
    if (kind == 0) {
      r.kind = UpdateRule::kSgd;
      r.momentum = 0.9f;
      r.weight_decay = 0.01f;
      opt = std::make_unique<braid::nn::Sgd>(0.9f, 0.01f);
    } else if (kind == 1) {
      r.kind = UpdateRule::kAdamW;
      r.weight_decay = 0.01f;
      opt = std::make_unique<braid::nn::AdamW>(0.9f, 0.999f, 1e-8f, 0.01f);
    } else {
      r.kind = UpdateRule::kSgd;
      r.weight_decay = 0.01f;
      opt = std::make_unique<braid::nn::Sgd>(0.0f, 0.01f);
    }
    for (int t = 1; t <= 4; ++t) {
      std::vector<float> g(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) g[size_t(i)] = p.grad.f32()[i] = std::sin(float(i * t));
      opt->step({&p}, 0.05f);
      braid::ps::apply_update(r, w.data(), g.data(), state.data(), n, 0.05f, t, true);
      int64_t differ = 0;
      for (int64_t i = 0; i < n; ++i) differ += w[size_t(i)] != p.data.f32()[i];
      EXPECT_EQ(differ, 0) << "t " << t << ": w[0] " << w[0] << " vs " << p.data.f32()[0];
    }
  }
}

}  // namespace
