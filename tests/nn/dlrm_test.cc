// The DLRM workload: finite-difference checks of EmbeddingBag (sparse and
// dense gradients), binary cross-entropy with logits and a tiny Dlrm in
// both interactions; the click data's determinism, layout, Zipf shares
// and entropy floor; and serial training that reaches the floor.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>

#include "braid/dlrm.h"
#include "braid/error.h"
#include "braid/loss.h"
#include "braid/rng.h"
#include "braid/trainer.h"

using namespace braid;
using namespace braid::nn;

namespace {

void randomize(Tensor& t, uint64_t seed, float scale = 1.0f) {
  CounterRng rng(seed);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = rng.normal() * scale;
}

double project(const Tensor& y, const Tensor& r) {
  double s = 0;
  for (int64_t i = 0; i < y.numel(); ++i) s += double(y.f32()[i]) * double(r.f32()[i]);
  return s;
}

// Central differences of `f` in every element of `v` (or `samples` random
// ones) against the analytic gradient `g`, to a tolerance relative to g's
// largest element.
void compare(const std::string& what, Tensor& v, const Tensor& g, const std::function<double()>& f,
             int samples = 1 << 30, double eps = 1e-2, double rtol = 2e-2) {
  ASSERT_EQ(v.numel(), g.numel()) << what;
  double gmax = 0;
  for (int64_t i = 0; i < g.numel(); ++i) gmax = std::max(gmax, double(std::fabs(g.f32()[i])));
  CounterRng rng(11, 3);
  const int64_t n = std::min<int64_t>(samples, v.numel());
  for (int64_t k = 0; k < n; ++k) {
    const int64_t i = n == v.numel() ? k : int64_t(rng.below(uint64_t(v.numel())));
    const float orig = v.f32()[i];
    v.f32()[i] = float(orig + eps);
    const double lp = f();
    v.f32()[i] = float(orig - eps);
    const double lm = f();
    v.f32()[i] = orig;
    EXPECT_NEAR(g.f32()[i], (lp - lm) / (2 * eps), rtol * std::max(gmax, 1e-3) + 1e-4)
        << what << " element " << i;
  }
}

Tensor ids_tensor(Shape s, std::vector<int32_t> v) {
  Tensor t(s, DType::kI32);
  for (size_t i = 0; i < v.size(); ++i) t.i32()[i] = v[i];
  return t;
}

// Rows 0..5, bags of 3 with repeats and padding (−1), one all-padding bag.
Tensor bag_ids() { return ids_tensor({4, 3}, {2, 5, 2, 0, -1, -1, -1, -1, -1, 5, 3, 0}); }

}  // namespace

class EmbeddingBagGrad : public ::testing::TestWithParam<EmbeddingBag::Mode> {};

TEST_P(EmbeddingBagGrad, DenseAndSparseGradientsMatchFiniteDifferences) {
  EmbeddingBag e("emb", 6, 3, GetParam());
  randomize(e.weight().data, 1);
  Tensor ids = bag_ids();
  Context ctx;
  const Tensor& y = e.forward(ids, ctx);
  ASSERT_EQ(y.shape(), Shape({4, 3}));
  for (int64_t c = 0; c < 3; ++c) EXPECT_EQ(y.f32()[2 * 3 + c], 0.0f) << "all-padding bag";
  Tensor r({4, 3});
  randomize(r, 2);
  e.weight().grad.zero();
  int fired = 0;
  ctx.grad_ready = [&](Parameter& p) { fired += &p == &e.weight(); };
  e.backward(r, ctx);
  EXPECT_EQ(fired, 1);
  Tensor dense = e.weight().grad;
  compare("weight", e.weight().data, dense, [&] { return project(e.forward(ids, ctx), r); });

  // Sparse form: the distinct real ids ascending, and their dense rows.
  EXPECT_EQ(e.touched_rows(), std::vector<int64_t>({0, 2, 3, 5}));
  ASSERT_EQ(e.row_grads().shape(), Shape({4, 3}));
  std::vector<bool> touched(6, false);
  for (size_t u = 0; u < e.touched_rows().size(); ++u) {
    const int64_t row = e.touched_rows()[u];
    touched[size_t(row)] = true;
    for (int64_t c = 0; c < 3; ++c)
      EXPECT_EQ(e.row_grads().f32()[int64_t(u) * 3 + c], dense.f32()[row * 3 + c]) << row;
  }
  for (int64_t row = 0; row < 6; ++row) {
    if (touched[size_t(row)]) continue;
    for (int64_t c = 0; c < 3; ++c) EXPECT_EQ(dense.f32()[row * 3 + c], 0.0f) << row;
  }

  // Without the dense form the table's grad is left alone; the sparse one
  // is recomputed, not accumulated.
  e.set_dense_grad(false);
  e.weight().grad.zero();
  e.forward(ids, ctx);
  e.backward(r, ctx);
  for (int64_t i = 0; i < 18; ++i) EXPECT_EQ(e.weight().grad.f32()[i], 0.0f);
  for (size_t u = 0; u < 4; ++u)
    for (int64_t c = 0; c < 3; ++c)
      EXPECT_EQ(e.row_grads().f32()[int64_t(u) * 3 + c],
                dense.f32()[e.touched_rows()[u] * 3 + c]);
}

INSTANTIATE_TEST_SUITE_P(Modes, EmbeddingBagGrad,
                         ::testing::Values(EmbeddingBag::Mode::kSum, EmbeddingBag::Mode::kMean),
                         [](const auto& i) {
                           return i.param == EmbeddingBag::Mode::kSum ? "Sum" : "Mean";
                         });

TEST(EmbeddingBag, MeanDividesByTheRealIdsOfEachBag) {
  EmbeddingBag e("emb", 6, 2, EmbeddingBag::Mode::kMean);
  for (int64_t i = 0; i < 12; ++i) e.weight().data.f32()[i] = float(i);
  Context ctx;
  const Tensor& y = e.forward(bag_ids(), ctx);
  // Bag 0 = rows {2, 5, 2}: ((4,5) + (10,11) + (4,5)) / 3.
  EXPECT_FLOAT_EQ(y.f32()[0], 6.0f);
  EXPECT_FLOAT_EQ(y.f32()[1], 7.0f);
  // Bag 1 = row 0 and two paddings: row 0 itself.
  EXPECT_FLOAT_EQ(y.f32()[2], 0.0f);
  EXPECT_FLOAT_EQ(y.f32()[3], 1.0f);
}

TEST(EmbeddingBag, RefusesIdsOutsideTheTable) {
  EmbeddingBag e("emb.3", 6, 2);
  Context ctx;
  for (int32_t bad : {6, -2}) {
    try {
      e.forward(ids_tensor({1, 2}, {1, bad}), ctx);
      FAIL() << bad;
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find("emb.3"), std::string::npos) << err.what();
      EXPECT_NE(std::string(err.what()).find("id " + std::to_string(bad)), std::string::npos)
          << err.what();
    }
  }
  EXPECT_THROW(e.forward(Tensor({1, 2}), ctx), Error);  // f32, not ids
}

TEST(BinaryCrossEntropy, GradientMatchesFiniteDifferences) {
  BinaryCrossEntropyWithLogits bce;
  Tensor z({6, 1});
  randomize(z, 3, 3.0f);
  Tensor y = ids_tensor({6}, {1, 0, 0, 1, 1, 0});
  bce.forward(z, y);
  Tensor g = bce.backward(1.0f);
  compare("logits", z, g, [&] { return bce.forward(z, y); }, 1 << 30, 1e-3, 1e-2);
  // scale multiplies the gradient.
  bce.forward(z, y);
  const Tensor& g2 = bce.backward(0.25f);
  for (int64_t i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(g2.f32()[i], 0.25f * g.f32()[i]);
}

TEST(BinaryCrossEntropy, StableForLargeLogits) {
  BinaryCrossEntropyWithLogits bce;
  Tensor z({4});
  const float v[4] = {100, -100, 100, -100};
  for (int i = 0; i < 4; ++i) z.f32()[i] = v[i];
  Tensor y = ids_tensor({4}, {1, 0, 0, 1});
  // Right and confident: ~0 (e^-100); wrong and confident: exactly |z| each.
  EXPECT_NEAR(bce.forward(z, y), 200.0, 1e-9);
  EXPECT_EQ(bce.correct(), 2);
  const Tensor& g = bce.backward(1.0f);
  const float want[4] = {0, 0, 1, -1};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(g.f32()[i], want[i], 1e-6) << i;
}

TEST(BinaryCrossEntropy, RefusesBadTargets) {
  BinaryCrossEntropyWithLogits bce;
  Tensor z({3});
  try {
    bce.forward(z, ids_tensor({3}, {0, 2, 1}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("target 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(bce.forward(z, ids_tensor({2}, {0, 1})), Error);
}

class DlrmGrad : public ::testing::TestWithParam<DlrmConfig::Interaction> {};

TEST_P(DlrmGrad, EveryParameterMatchesFiniteDifferences) {
  DlrmConfig c;
  c.dense = 3;
  c.rows = {5, 7, 4};
  c.bag = 2;
  c.dim = 4;
  c.bottom = {6};
  c.top = {5};
  c.interaction = GetParam();
  Dlrm m("dlrm", c, 9);
  // Larger tables than DLRM's ±1/√rows, so the dot products carry signal.
  for (Parameter* p : m.parameters()) randomize(p->data, 100 + p->size(), 0.5f);
  const int64_t B = 5;
  Tensor x({B, c.input_width()});
  CounterRng rng(4);
  for (int64_t b = 0; b < B; ++b) {
    float* row = x.f32() + b * c.input_width();
    for (int64_t d = 0; d < c.dense; ++d) row[d] = rng.normal();
    for (int64_t f = 0; f < 3; ++f)
      for (int64_t j = 0; j < c.bag; ++j)
        row[c.dense + f * c.bag + j] = float(rng.below(uint64_t(c.rows[size_t(f)])));
  }
  x.f32()[c.dense + 1] = -1.0f;  // one padded slot
  Tensor y = ids_tensor({B}, {1, 0, 1, 1, 0});
  BinaryCrossEntropyWithLogits bce;
  Context ctx;
  auto params = m.parameters();
  zero_grad(params);
  bce.forward(m.forward(x, ctx), y);
  std::map<std::string, int> fired;
  ctx.grad_ready = [&](Parameter& p) { fired[p.name]++; };
  m.backward(bce.backward(1.0f), ctx);
  ctx.grad_ready = nullptr;
  ASSERT_EQ(fired.size(), params.size());
  for (Parameter* p : params) EXPECT_EQ(fired[p->name], 1) << p->name;
  for (Parameter* p : params) {
    Tensor g = p->grad;
    compare(p->name, p->data, g, [&] { return bce.forward(m.forward(x, ctx), y); }, 24);
  }
}

INSTANTIATE_TEST_SUITE_P(Interactions, DlrmGrad,
                         ::testing::Values(DlrmConfig::Interaction::kDot,
                                           DlrmConfig::Interaction::kCat),
                         [](const auto& i) {
                           return i.param == DlrmConfig::Interaction::kDot ? "Dot" : "Cat";
                         });

TEST(Dlrm, RefusesBadConfigAndInput) {
  DlrmConfig c;
  c.rows = {};
  EXPECT_THROW(Dlrm("d", c, 1), Error);
  c.rows = {10, int64_t(1) << 25};
  EXPECT_THROW(Dlrm("d", c, 1), Error);
  c.rows = {10, 10};
  c.dense = 2;
  Dlrm m("d", c, 1);
  Context ctx;
  EXPECT_THROW(m.forward(Tensor({2, 3}), ctx), Error);  // width 4 expected
  Tensor x({1, 4});
  x.f32()[2] = 1.5f;  // not an id
  try {
    m.forward(x, ctx);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("feature 0"), std::string::npos) << e.what();
  }
  x.f32()[2] = 1;
  x.f32()[3] = 10;  // outside table 1
  EXPECT_THROW(m.forward(x, ctx), Error);
}

namespace {
ClickConfig small_clicks() {
  ClickConfig c;
  c.samples = 4000;
  c.test_samples = 1000;
  c.features = 3;
  c.rows = 50;
  c.bag = 2;
  c.seed = 5;
  return c;
}
}  // namespace

TEST(ClickData, DeterministicWithDisjointSplitsInTheModelsLayout) {
  ClickData a(small_clicks(), "train"), b(small_clicks(), "train"), t(small_clicks(), "test");
  ASSERT_EQ(a.size(), 4000);
  ASSERT_EQ(t.size(), 1000);
  ASSERT_EQ(a.width(), 4 + 3 * 2);
  std::vector<int64_t> idx = {0, 17, 3999};
  Tensor xa, ya, xb, yb, xt, yt;
  a.gather(idx.data(), 3, xa, ya);
  b.gather(idx.data(), 3, xb, yb);
  std::vector<int64_t> tidx = {0, 17, 999};
  t.gather(tidx.data(), 3, xt, yt);
  ASSERT_EQ(xa.shape(), Shape({3, 10}));
  for (int64_t i = 0; i < xa.numel(); ++i) EXPECT_EQ(xa.f32()[i], xb.f32()[i]);
  for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(ya.i32()[i], yb.i32()[i]);
  int differ = 0;
  for (int64_t i = 0; i < xa.numel(); ++i) differ += xa.f32()[i] != xt.f32()[i];
  EXPECT_GT(differ, 15) << "the test split repeats the training samples";
  // Row 1 is sample 17: dense values, then each feature's bag of ids.
  for (int64_t d = 0; d < 4; ++d) EXPECT_EQ(xa.f32()[10 + d], a.dense(17)[d]);
  for (int64_t f = 0; f < 3; ++f)
    for (int64_t j = 0; j < 2; ++j) EXPECT_EQ(xa.f32()[10 + 4 + f * 2 + j], float(a.id(17, f, j)));
  EXPECT_EQ(ya.i32()[1], a.label(17));
  // Another seed, other data.
  ClickConfig other = small_clicks();
  other.seed = 6;
  ClickData c(other, "train");
  EXPECT_NE(c.teacher_probability(0), a.teacher_probability(0));
  std::vector<int64_t> bad = {4000};
  EXPECT_THROW(a.gather(bad.data(), 1, xa, ya), Error);
}

TEST(ClickData, IdsFollowTheZipfLaw) {
  ClickConfig c;
  c.samples = 200000;
  c.test_samples = 1;
  c.features = 2;
  c.rows = 1000;
  c.zipf = 1.1;
  ClickData d(c, "train");
  std::vector<int64_t> count(size_t(c.rows), 0);
  for (int64_t i = 0; i < d.size(); ++i) ++count[size_t(d.id(i, 1))];
  const double n = double(d.size());
  for (int64_t k : {0, 1, 9, 99}) {
    const double p = ClickData::zipf_probability(c.rows, c.zipf, k);
    const double sigma = std::sqrt(p * (1 - p) / n);
    EXPECT_NEAR(double(count[size_t(k)]) / n, p, 5 * sigma) << "id " << k;
  }
  // The expected shares themselves: P(0)/P(1) = 2^1.1, summing to one.
  EXPECT_NEAR(ClickData::zipf_probability(c.rows, c.zipf, 0) /
                  ClickData::zipf_probability(c.rows, c.zipf, 1),
              std::pow(2.0, 1.1), 1e-12);
  double total = 0;
  for (int64_t k = 0; k < c.rows; ++k) total += ClickData::zipf_probability(c.rows, c.zipf, k);
  EXPECT_NEAR(total, 1.0, 1e-12);
}

TEST(ClickData, FloorIsTheTeachersExpectedLogLoss) {
  ClickData d(small_clicks(), "train");
  double h = 0, realised = 0, clicks = 0;
  for (int64_t i = 0; i < d.size(); ++i) {
    const double p = d.teacher_probability(i);
    h -= p * std::log(p) + (1 - p) * std::log(1 - p);
    realised -= d.label(i) ? std::log(p) : std::log(1 - p);
    clicks += d.label(i);
  }
  const double n = double(d.size());
  EXPECT_NEAR(d.best_log_loss(), h / n, 1e-12);
  // Labels are drawn from the teacher: its log loss on them is the floor
  // up to sampling noise (σ ≈ 0.5/√n), and a constant predictor is worse.
  EXPECT_NEAR(realised / n, d.best_log_loss(), 4 * 0.5 / std::sqrt(n));
  const double rate = clicks / n;
  EXPECT_NEAR(d.base_log_loss(), -(rate * std::log(rate) + (1 - rate) * std::log(1 - rate)), 1e-12);
  EXPECT_GT(d.base_log_loss(), d.best_log_loss() + 0.05);
}

TEST(ClickData, RefusesBadConfig) {
  ClickConfig c = small_clicks();
  c.rows = 0;
  EXPECT_THROW(ClickData(c, "train"), Error);
  c = small_clicks();
  c.zipf = -1;
  EXPECT_THROW(ClickData(c, "train"), Error);
  try {
    ClickData(small_clicks(), "valid");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("valid"), std::string::npos) << e.what();
  }
}

// 500 SGD steps (2 epochs) on a small click set bring the test log loss
// within kMargin of the teacher's floor, from a start near the constant
// predictor's. The margin is what the finite sample leaves: rare ids of the
// Zipf tail are seen a handful of times, so their teacher weights cannot
// be learnt exactly.
TEST(DlrmTraining, SerialTrainingApproachesTheFloor) {
  constexpr double kMargin = 0.015;
  ClickConfig c;
  c.samples = 32768;
  c.test_samples = 8192;
  c.features = 4;
  c.rows = 100;
  c.seed = 3;
  ClickData train(c, "train"), test(c, "test");
  auto model = make_dlrm(dlrm_config_for(c, 8), 1);
  Sgd opt(0.9f);
  LrSchedule sched;
  sched.base = 0.1f;
  TrainOptions o;
  o.global_batch = 128;
  o.seed = 1;
  Trainer trainer(*model, train, opt, sched, o);
  BinaryCrossEntropyWithLogits bce;
  trainer.set_loss(bce);
  const double before = trainer.evaluate(test, 1024).loss;
  EXPECT_GT(before, test.best_log_loss() + 0.1);
  for (int s = 0; s < 500; ++s) trainer.step();
  const double after = trainer.evaluate(test, 1024).loss;
  EXPECT_LT(after, test.best_log_loss() + kMargin)
      << "before " << before << " floor " << test.best_log_loss();
  EXPECT_GT(after, test.best_log_loss() - 0.02) << "below the floor by more than noise";
}
