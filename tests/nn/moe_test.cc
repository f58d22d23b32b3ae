// The MoE layer (moe.h): finite-difference gradients of the whole layer
// (gate through the softmax and the combine weights, experts, input, and
// the load-balancing loss), the capacity rule and its deterministic
// dropping, bad configurations, and an MoE GPT that trains.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "braid/error.h"
#include "braid/models.h"
#include "braid/moe.h"
#include "braid/moe_counters.h"
#include "braid/rng.h"

using namespace braid;
using namespace braid::nn;

namespace {

void randomize(Tensor& t, CounterRng& rng, float scale) {
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = rng.normal() * scale;
}

// L = Σ y ⊙ R + aux_coef · mean over groups of aux_b, whose gradient the
// layer's backward gives when ctx.loss_scale = 1 / tokens.
struct Objective {
  MoeLayer& m;
  Tensor& x;
  Tensor r;
  Context ctx;
  float coef;
  double operator()() {
    const Tensor& y = m.forward(x, ctx);
    double s = 0;
    for (int64_t i = 0; i < y.numel(); ++i) s += double(y.f32()[i]) * r.f32()[i];
    const Routing& ro = m.router().routing();
    return s + double(coef) * ro.aux_sum / double(ro.tokens / ro.group);
  }
};

// `out_weight` scales R (0: the objective is the aux loss alone, so its
// gradient is not hidden under the output's).
void check_layer_gradients(const MoeConfig& c, Shape xs, uint64_t seed, float out_weight = 1.0f) {
  const int64_t C = xs.back();
  MoeLayer m("moe", C, 2 * C, c);
  CounterRng rng(seed, 5);
  for (Parameter* p : m.parameters()) randomize(p->data, rng, 0.5f);
  Tensor x(xs);
  randomize(x, rng, 1.0f);
  Objective f{m, x, Tensor(), Context(), c.aux_coef};
  f.ctx.loss_scale = float(1.0 / double(x.numel() / C));
  const Tensor& y0 = m.forward(x, f.ctx);
  f.r = Tensor(y0.shape());
  randomize(f.r, rng, out_weight);
  auto params = m.parameters();
  zero_grad(params);
  std::map<std::string, int> fired;
  f.ctx.grad_ready = [&](Parameter& p) { fired[p.name]++; };
  Tensor dx(m.backward(f.r, f.ctx));
  f.ctx.grad_ready = nullptr;
  for (Parameter* p : params) EXPECT_EQ(fired[p->name], 1) << p->name;

  // Numeric gradients; an element whose ±eps changes the routing (a choice
  // or a drop) is skipped: the objective is not differentiable there.
  const double eps = 1e-2;
  int checked = 0, skipped = 0;
  auto compare = [&](const std::string& what, Tensor& v, const Tensor& g) {
    double gmax = 0;
    for (int64_t i = 0; i < g.numel(); ++i) gmax = std::max(gmax, double(std::fabs(g.f32()[i])));
    const int64_t n = std::min<int64_t>(v.numel(), 40);
    for (int64_t s = 0; s < n; ++s) {
      const int64_t i = n == v.numel() ? s : int64_t(rng.below(uint64_t(v.numel())));
      const float orig = v.f32()[i];
      v.f32()[i] = float(orig + eps);
      const double lp = f();
      const auto route_p = m.router().routing().slot;
      const auto exp_p = m.router().routing().expert;
      v.f32()[i] = float(orig - eps);
      const double lm = f();
      const bool same = route_p == m.router().routing().slot && exp_p == m.router().routing().expert;
      v.f32()[i] = orig;
      if (!same) {
        ++skipped;
        continue;
      }
      ++checked;
      const double fd = (lp - lm) / (2 * eps);
      EXPECT_NEAR(g.f32()[i], fd, 2e-2 * std::max(gmax, 1e-3) + 1e-4)
          << what << " element " << i;
    }
  };
  compare("input", x, dx);
  for (Parameter* p : params) {
    Tensor g(p->grad);
    compare(p->name, p->data, g);
  }
  EXPECT_GT(checked, 4 * skipped + 20) << "too many routing flips to check";
}

}  // namespace

TEST(Moe, GradientsTop1AmpleCapacity) {
  MoeConfig c;
  c.experts = 4;
  c.top_k = 1;
  c.capacity_factor = 8;
  c.aux_coef = 0.5f;
  check_layer_gradients(c, {2, 6, 8}, 1);
}

TEST(Moe, GradientsTop2WithDrops) {
  MoeConfig c;
  c.experts = 4;
  c.top_k = 2;
  c.capacity_factor = 0.75f;
  c.aux_coef = 0.3f;
  // Drops must really happen for this to test the drop path.
  MoeLayer m("moe", 8, 16, c);
  CounterRng rng(3, 5);
  for (Parameter* p : m.parameters()) randomize(p->data, rng, 0.5f);
  Tensor x({3, 8, 8});
  randomize(x, rng, 1.0f);
  Context ctx;
  m.forward(x, ctx);
  EXPECT_GT(m.router().routing().dropped, 0);
  check_layer_gradients(c, {3, 8, 8}, 3);
}

TEST(Moe, GradientsOfTheAuxLossAlone) {
  MoeConfig c;
  c.experts = 4;
  c.top_k = 2;
  c.capacity_factor = 1.0f;
  c.aux_coef = 1.0f;
  check_layer_gradients(c, {2, 8, 8}, 4, 0.0f);
}

TEST(Moe, GradientsTwoDimensionalInputIsOneGroup) {
  MoeConfig c;
  c.experts = 3;
  c.top_k = 2;
  c.capacity_factor = 1.0f;
  c.aux_coef = 0.2f;
  check_layer_gradients(c, {10, 6}, 9);
}

TEST(Moe, CapacityDropsInOrderAndPerGroup) {
  MoeConfig c;
  c.experts = 2;
  c.top_k = 1;
  c.capacity_factor = 0.5f;  // capacity = ceil(0.5 · 8 / 2) = 2 per expert per group
  Router r("g", 2, c);
  EXPECT_EQ(r.capacity(8), 2);
  // The gate sends every token with x[0] > x[1] to expert 0, else expert 1.
  r.weight().data.f32()[0] = 1, r.weight().data.f32()[1] = 0;
  r.weight().data.f32()[2] = 0, r.weight().data.f32()[3] = 1;
  // Two groups of 8 tokens; group 0: tokens 0..5 prefer expert 0; group 1: all expert 1.
  std::vector<float> x(16 * 2);
  for (int t = 0; t < 16; ++t) {
    const bool e0 = t < 6;
    x[size_t(2 * t)] = e0 ? 1.0f : 0.0f;
    x[size_t(2 * t + 1)] = e0 ? 0.0f : 1.0f;
  }
  r.forward(x.data(), 16, 8);
  const Routing& ro = r.routing();
  // Group 0: tokens 0, 1 keep expert 0, 2..5 drop; 6, 7 keep expert 1.
  // Group 1: tokens 8, 9 keep expert 1; 10..15 drop.
  std::vector<int64_t> kept;
  for (int t = 0; t < 16; ++t)
    if (ro.slot[size_t(t)] >= 0) kept.push_back(t);
  EXPECT_EQ(kept, (std::vector<int64_t>{0, 1, 6, 7, 8, 9}));
  EXPECT_EQ(ro.dropped, 10);
  EXPECT_EQ(ro.per_expert, (std::vector<int64_t>{2, 4}));
  // Slots expert-major: expert 0's rows (tokens 0, 1) first.
  EXPECT_EQ(ro.slot[0], 0);
  EXPECT_EQ(ro.slot[1], 1);
  EXPECT_EQ(ro.slot[6], 2);
  EXPECT_EQ(ro.slot[9], 5);
  // Balance: f = (6/8, 2/8) and (0, 1) → aux > 1 for both groups.
  EXPECT_GT(ro.aux_sum, 2.0);
}

TEST(Moe, UniformRoutingHasAuxLossOne) {
  MoeConfig c;
  c.experts = 4;
  Router r("g", 3, c);  // zero gate: p = 1/4 everywhere, all choose expert 0
  std::vector<float> x(8 * 3, 1.0f);
  r.forward(x.data(), 8, 8);
  // f = (1, 0, 0, 0), P = 1/4 each: aux = 4 · 1 · 1/4 = 1.
  EXPECT_NEAR(r.routing().aux_sum, 1.0, 1e-6);
}

TEST(Moe, BadConfigurationsAreNamed) {
  MoeConfig c;
  c.experts = 2;
  c.top_k = 3;
  try {
    check_moe(c);
    FAIL() << "top-k above experts accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("top-k 3 > experts 2"), std::string::npos) << e.what();
  }
  c.top_k = 1;
  c.experts = 3;
  try {
    check_moe(c, 2);
    FAIL() << "experts not divisible by ep accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("experts 3 not divisible by the expert-parallel size ep 2"),
              std::string::npos)
        << e.what();
  }
  c.experts = 2;
  c.capacity_factor = 0;
  EXPECT_THROW(check_moe(c), Error);
}

TEST(Moe, GptWithExpertsTrainsAndCounts) {
  GptConfig g;
  g.vocab = 16, g.context = 8, g.layers = 2, g.dim = 16, g.heads = 2;
  g.moe.experts = 4, g.moe.top_k = 2, g.moe.every = 2;
  auto m = make_gpt(g, 1);
  bool found = false;
  for (Parameter* p : m->parameters()) found = found || p->name == "h.1.mlp.experts.fc.weight";
  EXPECT_TRUE(found);
  EXPECT_NE(dynamic_cast<MoeTransformerBlock*>(&m->child(2)), nullptr);
  EXPECT_NE(dynamic_cast<TransformerBlock*>(&m->child(1)), nullptr);
  Tensor x({2, 8}, DType::kI32);
  for (int i = 0; i < 16; ++i) x.i32()[i] = i % 16;
  moe_take_counts();
  Context ctx;
  const Tensor& y = m->forward(x, ctx);
  EXPECT_EQ(y.shape(), (Shape{2, 8, 16}));
  EXPECT_EQ(moe_take_counts().routed, 0) << "a forward alone is not counted";
  m->forward(x, ctx);
  Tensor dy(y.shape());
  m->backward(dy, ctx);
  const MoeCounts mc = moe_take_counts();
  EXPECT_EQ(mc.routed, 2 * 8 * 2);
  int64_t total = 0;
  for (int64_t t : mc.tokens) total += t;
  EXPECT_EQ(total + mc.dropped, mc.routed);
  EXPECT_EQ(mc.groups, 2);
}
