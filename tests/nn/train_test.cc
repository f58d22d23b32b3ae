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

// A hook set that writes down every stage the loop calls, in order, and
// doubles the loss sum in after_step (the loop must report what the last
// hook leaves).
// "f3": stage letter and unit.
std::string tag(char stage, size_t unit) {
  std::string s(1, stage);
  s += std::to_string(unit);
  return s;
}

struct RecordingHooks : StepHooks {
  std::vector<std::string> log;
  size_t ready = 0;  // grad-ready calls so far this step
  void note(const std::string& what) { log.push_back(what + " r" + std::to_string(ready)); }
  void begin_step(int64_t step, const std::vector<Parameter*>& ps) override {
    ready = 0;
    note("begin " + std::to_string(step));
    StepHooks::begin_step(step, ps);
  }
  void before_forward(size_t u) override { note(tag('f', u)); }
  void after_forward(size_t u) override { note(tag('F', u)); }
  void before_backward(size_t u) override { note(tag('b', u)); }
  void after_backward(size_t u) override { note(tag('B', u)); }
  GradReadyHook grad_ready_hook() override {
    note("hook");
    return [this](Parameter&) { ++ready; };
  }
  void before_optimizer_step(const std::vector<Parameter*>& ps) override {
    note("reduce " + std::to_string(ps.size()));
  }
  double clip_grad_norm(const std::vector<Parameter*>& ps, double max_norm) override {
    note("clip");
    return StepHooks::clip_grad_norm(ps, max_norm);
  }
  void optimizer_step(Optimizer& opt, const std::vector<Parameter*>& ps, float lr) override {
    note("update");
    StepHooks::optimizer_step(opt, ps, lr);
  }
  void after_step(StepState& st) override {
    note("after");
    st.sums[0] *= 2;
  }
};

TEST(StepLoop, CustomHooksSeeTheStagesInOrder) {
  ByteText data = text();
  auto m = make_gpt(small(), 1), ref = make_gpt(small(), 1);
  Sgd opt(0.9f), ref_opt(0.9f);
  TrainOptions o;
  o.global_batch = 8;
  o.accum = 2;
  o.clip = 1.0;
  Trainer t(*m, data, opt, LrSchedule{}, o), plain(*ref, data, ref_opt, LrSchedule{}, o);
  RecordingHooks rec;
  t.set_hooks(rec);
  // The built-in set is out of use once replaced.
  t.hooks().reduce_gradients = [](const std::vector<Parameter*>&) {
    FAIL() << "built-in hook ran";
  };
  const size_t units = m->size(), params = m->parameters().size();
  ASSERT_GT(units, 2u);
  for (int64_t step = 0; step < 2; ++step) {
    rec.log.clear();
    StepStats st = t.step(), ps = plain.step();
    // Every micro-batch runs the units forward, then backward in reverse;
    // gradients become ready only during the last micro-batch's backward,
    // all of them by the time the loop asks for the reduction.
    std::vector<std::string> want = {"begin " + std::to_string(step) + " r0", "hook r0"};
    for (int micro = 0; micro < 2; ++micro) {
      for (size_t u = 0; u < units; ++u) {
        want.push_back(tag('f', u) + " r0");
        want.push_back(tag('F', u) + " r0");
      }
      // Inside the last backward the count depends on the layers: there
      // only its prefix is pinned (an entry ending in "r").
      const std::string count = micro == 0 ? "0" : "";
      for (size_t u = units; u-- > 0;) {
        want.push_back(tag('b', u) + " r" + count);
        want.push_back(tag('B', u) + " r" + count);
      }
    }
    const std::string n = std::to_string(params);
    want.push_back("reduce " + n + " r" + n);
    for (const char* tail : {"clip r", "update r", "after r"}) want.push_back(tail + n);
    ASSERT_EQ(rec.log.size(), want.size()) << "step " << step;
    size_t last_count = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      if (want[i].back() != 'r') {
        EXPECT_EQ(rec.log[i], want[i]) << "call " << i;
        continue;
      }
      // Last micro-batch's backward: gradients become ready as it goes.
      ASSERT_EQ(rec.log[i].rfind(want[i], 0), 0u) << "call " << i << ": " << rec.log[i];
      const size_t count = std::stoul(rec.log[i].substr(want[i].size()));
      EXPECT_GE(count, last_count) << "call " << i;
      last_count = count;
    }
    EXPECT_EQ(last_count, params);  // all final once the first unit's backward is done
    // Same model, same data: the hooks change only the reported sum.
    EXPECT_EQ(st.loss, 2 * ps.loss) << "step " << step;
    EXPECT_EQ(st.rows, ps.rows);
    EXPECT_GT(st.grad_norm, 0.0);
    EXPECT_EQ(st.grad_norm, ps.grad_norm);
  }
  EXPECT_TRUE(bitwise_equal(m->parameters(), ref->parameters(), false));
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

// Recomputation trades compute for memory: a block's activations and
// gradient buffers are freed after its forward and after its backward, so
// the peak holds one block's worth plus each block's input, not all of them.
TEST(Recompute, HoldsOneBlocksActivationsAtATime) {
  ByteText data = text();
  auto peak_activation_bytes = [&](bool recompute) {
    GptConfig c = small(0, recompute);
    c.layers = 8;
    c.dim = 32;
    auto m = make_gpt(c, 3);
    Tensor x, y;
    int64_t idx[8] = {0, 17, 99, 250, 3, 40, 77, 120};
    data.gather(idx, 8, x, y);
    const size_t base = tensor_bytes_in_use();
    reset_tensor_peak_bytes();
    Context ctx;
    SoftmaxCrossEntropy ce;
    ce.forward(m->forward(x, ctx), y);
    m->backward(ce.backward(0.01f), ctx);
    return double(tensor_peak_bytes() - base);
  };
  const double stored = peak_activation_bytes(false), recomputed = peak_activation_bytes(true);
  EXPECT_GT(stored, 0);
  EXPECT_LT(recomputed, 0.35 * stored) << "stored " << stored << " B, recomputed " << recomputed
                                       << " B";
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
