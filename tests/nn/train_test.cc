// Training-loop properties the parallel layers will rely on: the
// grad-ready hook, accumulation and split invariance, recomputation,
// dropout keys, optimizer semantics, schedule and clipping.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>

#include "braid/error.h"
#include "braid/models.h"
#include "braid/rng.h"
#include "braid/trainer.h"

using namespace braid;
using namespace braid::nn;

namespace {
ByteText text() {
  std::string s;
  for (int i = 0; i < 300; ++i) s += "pack my box with five dozen liquor jugs " + std::to_string(i % 13);
  return ByteText(std::vector<uint8_t>(s.begin(), s.end()), 8, "pangram");
}
GptConfig small(float dropout = 0, bool recompute = false) {
  GptConfig c;
  c.vocab = 256;
  c.context = 8;
  c.layers = 2;
  c.dim = 16;
  c.heads = 2;
  c.dropout = dropout;
  c.recompute = recompute;
  return c;
}
bool bitwise_equal(const std::vector<Parameter*>& a, const std::vector<Parameter*>& b, bool grads) {
  for (size_t i = 0; i < a.size(); ++i) {
    const Tensor& x = grads ? a[i]->grad : a[i]->data;
    const Tensor& y = grads ? b[i]->grad : b[i]->data;
    if (std::memcmp(x.raw(), y.raw(), x.nbytes()) != 0) return false;
  }
  return true;
}
double max_rel_diff(const std::vector<Parameter*>& a, const std::vector<Parameter*>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i)
    for (int64_t k = 0; k < a[i]->size(); ++k) {
      double x = a[i]->data.f32()[k], y = b[i]->data.f32()[k];
      m = std::max(m, std::fabs(x - y) / (std::fabs(y) + 1e-3));
    }
  return m;
}
}  // namespace

TEST(GradReady, FiresOncePerParameterWithFinalGradientInReverseOrder) {
  ByteText data = text();
  auto m = make_gpt(small(), 1);
  Sgd opt(0.9f);
  TrainOptions o;
  o.global_batch = 8;
  o.accum = 2;
  Trainer t(*m, data, opt, LrSchedule{}, o);
  std::vector<std::string> order;
  std::map<std::string, Tensor> at_fire;
  t.hooks().grad_ready = [&](Parameter& p) {
    order.push_back(p.name);
    at_fire.insert_or_assign(p.name, p.grad);
  };
  std::vector<Parameter*> seen_by_reduce;
  t.hooks().reduce_gradients = [&](const std::vector<Parameter*>& ps) {
    seen_by_reduce = ps;
    for (Parameter* p : ps)  // the gradient the hook saw was already final
      EXPECT_EQ(std::memcmp(at_fire.at(p->name).raw(), p->grad.raw(), p->grad.nbytes()), 0)
          << p->name;
  };
  t.step();
  auto params = m->parameters();
  ASSERT_EQ(order.size(), params.size());  // once each, although accum = 2
  EXPECT_EQ(seen_by_reduce.size(), params.size());
  EXPECT_EQ(order.front(), "lm_head.weight");  // last layer first
  EXPECT_EQ(order.back(), "emb.wpe");
  order.clear();
  t.step();
  EXPECT_EQ(order.size(), params.size());
}

TEST(Trainer, AccumulationAndShardsMatchOneBigBatch) {
  ByteText data = text();
  // SGD: the update is linear in the gradient, so summation-order noise
  // stays at float rounding (Adam would amplify it on near-zero gradients).
  LrSchedule s;
  s.base = 0.1f;
  TrainOptions o;
  o.global_batch = 8;
  o.seed = 4;
  auto a = make_gpt(small(0.1f), 2);
  auto b = make_gpt(small(0.1f), 2);
  Sgd oa(0.9f), ob(0.9f);
  Trainer ta(*a, data, oa, s, o);
  o.accum = 4;
  Trainer tb(*b, data, ob, s, o);
  for (int i = 0; i < 3; ++i) {
    StepStats x = ta.step(), y = tb.step();
    EXPECT_NEAR(x.loss, y.loss, 1e-5 * x.loss);
  }
  EXPECT_LT(max_rel_diff(a->parameters(), b->parameters()), 1e-4);

  // Two "ranks" (world 2), each with its half of every global batch, with
  // gradients summed by hand: the same update as one process.
  auto r0 = make_gpt(small(0.1f), 2), r1 = make_gpt(small(0.1f), 2), one = make_gpt(small(0.1f), 2);
  Sgd o0(0.9f), o1(0.9f), o2(0.9f);
  TrainOptions w;
  w.global_batch = 8;
  w.seed = 4;
  Trainer serial(*one, data, o2, s, w);
  w.world = 2;
  w.rank = 0;
  Trainer t0(*r0, data, o0, s, w);
  w.rank = 1;
  Trainer t1(*r1, data, o1, s, w);
  // Lock-step the two ranks: rank 1 runs its backward first inside rank
  // 0's reduce hook, then both add each other's gradients.
  for (int i = 0; i < 2; ++i) {
    std::vector<Tensor> g1;
    double sums1[3];
    t1.hooks().reduce_gradients = [&](const std::vector<Parameter*>& ps) {
      for (Parameter* p : ps) g1.push_back(p->grad);
    };
    t1.hooks().reduce_sums = [&](double* v, int n) { std::memcpy(sums1, v, sizeof(double) * size_t(n)); };
    t1.step();  // applies only its own half; fixed below
    std::vector<Tensor> g0;
    t0.hooks().reduce_gradients = [&](const std::vector<Parameter*>& ps) {
      for (size_t k = 0; k < ps.size(); ++k) {
        g0.push_back(ps[k]->grad);
        for (int64_t e = 0; e < ps[k]->size(); ++e) ps[k]->grad.f32()[e] += g1[k].f32()[e];
      }
    };
    // [loss sum, rows, correct], summed over the two ranks as all_reduce would.
    t0.hooks().reduce_sums = [&](double* v, int n) {
      ASSERT_EQ(n, 3);
      for (int k = 0; k < n; ++k) v[k] += sums1[k];
    };
    StepStats st0 = t0.step();
    StepStats ss = serial.step();
    // Each rank saw half the rows, and the summed statistics are the
    // serial step's.
    EXPECT_EQ(2 * int64_t(sums1[1]), ss.rows) << "step " << i;
    EXPECT_EQ(st0.rows, ss.rows) << "step " << i;
    EXPECT_EQ(st0.correct, ss.correct) << "step " << i;
    EXPECT_NEAR(st0.loss, ss.loss, 1e-5 * ss.loss) << "step " << i;
    // Rank 1 took a half step; restore it to rank 0's parameters (a real
    // data-parallel run sums before either rank steps).
    auto p0 = r0->parameters(), p1 = r1->parameters();
    for (size_t k = 0; k < p0.size(); ++k) p1[k]->data.copy_from(p0[k]->data);
    o1 = o0;
  }
  EXPECT_LT(max_rel_diff(r0->parameters(), one->parameters()), 1e-4);
}

TEST(Recompute, GradientsAreBitwiseIdentical) {
  ByteText data = text();
  auto a = make_gpt(small(0.2f, false), 3), b = make_gpt(small(0.2f, true), 3);
  Tensor x, y;
  int64_t idx[4] = {0, 17, 99, 250};
  data.gather(idx, 4, x, y);
  for (auto* m : {a.get(), b.get()}) {
    Context ctx;
    ctx.seed = 9;
    ctx.step = 5;
    SoftmaxCrossEntropy ce;
    zero_grad(m->parameters());
    ce.forward(m->forward(x, ctx), y);
    m->backward(ce.backward(0.01f), ctx);
  }
  EXPECT_TRUE(bitwise_equal(a->parameters(), b->parameters(), true));
}

TEST(Dropout, MaskDependsOnGlobalSampleNotOnSplit) {
  Dropout d("d", 0.5f, 3);
  Tensor x({8, 10});
  x.fill(1.0f);
  Context ctx;
  ctx.seed = 1;
  ctx.step = 7;
  Tensor full = d.forward(x, ctx);
  Tensor half({4, 10});
  half.fill(1.0f);
  ctx.sample_offset = 4;
  Tensor second = d.forward(half, ctx);
  EXPECT_EQ(std::memcmp(full.f32() + 40, second.f32(), 40 * sizeof(float)), 0);
  int zeros = 0;
  for (int i = 0; i < 80; ++i) zeros += full.f32()[i] == 0.0f;
  EXPECT_GT(zeros, 20);
  EXPECT_LT(zeros, 60);
  ctx.step = 8;  // a new step draws a new mask
  ctx.sample_offset = 0;
  EXPECT_NE(std::memcmp(d.forward(x, ctx).f32(), full.f32(), 80 * sizeof(float)), 0);
  ctx.training = false;  // eval: identity
  EXPECT_EQ(&d.forward(x, ctx), &x);
}

TEST(Optim, SgdMomentumAndWeightDecayMatchPyTorchFormula) {
  Parameter p("w", {2});
  p.data.f32()[0] = 1.0f;
  p.data.f32()[1] = -2.0f;
  Sgd opt(0.9f, 0.1f);
  std::vector<Parameter*> ps{&p};
  double w = 1.0, buf = 0;
  for (int s = 0; s < 3; ++s) {
    p.grad.f32()[0] = 0.5f;
    double g = 0.5 + 0.1 * w;
    buf = 0.9 * buf + g;
    w -= 0.1 * buf;
    opt.step(ps, 0.1f);
  }
  EXPECT_NEAR(p.data.f32()[0], w, 1e-6);
}

TEST(Optim, AdamWMatchesPyTorchFormula) {
  Parameter p("w", {1});
  p.data.f32()[0] = 0.7f;
  AdamW opt(0.9f, 0.999f, 1e-8f, 0.01f);
  std::vector<Parameter*> ps{&p};
  double w = 0.7, m = 0, v = 0, lr = 0.01;
  for (int t = 1; t <= 4; ++t) {
    double g = 0.3 * t - 0.5;
    p.grad.f32()[0] = float(g);
    w *= 1 - lr * 0.01;
    m = 0.9 * m + 0.1 * g;
    v = 0.999 * v + 0.001 * g * g;
    double mh = m / (1 - std::pow(0.9, t)), vh = v / (1 - std::pow(0.999, t));
    w -= lr * mh / (std::sqrt(vh) + 1e-8);
    opt.step(ps, float(lr));
  }
  EXPECT_NEAR(p.data.f32()[0], w, 1e-6);
  EXPECT_EQ(opt.steps(), 4);
}

TEST(Optim, ClipByGlobalNorm) {
  Parameter a("a", {2}), b("b", {1});
  a.grad.f32()[0] = 3;
  a.grad.f32()[1] = 0;
  b.grad.f32()[0] = 4;
  std::vector<Parameter*> ps{&a, &b};
  EXPECT_NEAR(clip_grad_norm(ps, 10.0), 5.0, 1e-9);
  EXPECT_EQ(b.grad.f32()[0], 4.0f);
  EXPECT_NEAR(clip_grad_norm(ps, 1.0), 5.0, 1e-9);
  EXPECT_NEAR(std::sqrt(a.grad.f32()[0] * a.grad.f32()[0] + b.grad.f32()[0] * b.grad.f32()[0]), 1.0, 1e-5);
}

TEST(Optim, WarmupCosineSchedule) {
  LrSchedule s;
  s.base = 1.0f;
  s.warmup = 10;
  s.total = 110;
  s.cosine = true;
  s.min_ratio = 0.1f;
  EXPECT_NEAR(s.at(0), 0.1, 1e-6);
  EXPECT_NEAR(s.at(9), 1.0, 1e-6);
  EXPECT_NEAR(s.at(10), 1.0, 1e-6);
  EXPECT_NEAR(s.at(60), 0.55, 1e-6);
  EXPECT_NEAR(s.at(110), 0.1, 1e-6);
  EXPECT_NEAR(s.at(500), 0.1, 1e-6);
}

TEST(Trainer, MlpLearnsFashionMnistSubset) {
  std::unique_ptr<FashionMnist> data;
  try {
    data = std::make_unique<FashionMnist>("test");
  } catch (const Error& e) {
    FAIL() << e.what() << " (make test installs dataset-fashion-mnist through scripts/deps.sh)";
  }
  auto m = make_mlp({784, 64, 10}, 1);
  Sgd opt(0.9f);
  LrSchedule s;
  s.base = 0.05f;
  TrainOptions o;
  o.global_batch = 100;
  Trainer t(*m, *data, opt, s, o);
  double first = t.step().loss, last = 0;
  for (int i = 0; i < 60; ++i) last = t.step().loss;
  EXPECT_LT(last, first * 0.5);
  EXPECT_GT(t.evaluate(*data, 500).accuracy, 0.7);
}
