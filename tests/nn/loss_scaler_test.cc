// Dynamic loss scaling (loss_scaler.h): the scale's schedule, and the
// trainer under fp16 recovering from an overflow injected into backward.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "braid/error.h"
#include "braid/models.h"
#include "braid/precision.h"
#include "braid/trainer.h"

using namespace braid;
using namespace braid::nn;

TEST(LossScaler, HalvesOnOverflowAndDoublesAfterACleanRun) {
  LossScalerOptions o;
  o.init_scale = 1024;
  o.growth_interval = 3;
  o.min_scale = 256;
  LossScaler s(o);
  EXPECT_TRUE(s.update(5.0));
  EXPECT_TRUE(s.update(5.0));
  EXPECT_EQ(s.scale(), 1024);
  EXPECT_TRUE(s.update(5.0));  // third clean step in a row: doubles
  EXPECT_EQ(s.scale(), 2048);
  EXPECT_FALSE(s.update(std::numeric_limits<double>::infinity()));
  EXPECT_EQ(s.scale(), 1024);
  EXPECT_FALSE(s.update(std::nan("")));
  EXPECT_EQ(s.scale(), 512);
  EXPECT_FALSE(s.update(std::numeric_limits<double>::infinity()));
  EXPECT_FALSE(s.update(std::numeric_limits<double>::infinity()));
  EXPECT_EQ(s.scale(), 256) << "not below min_scale";
  EXPECT_EQ(s.skipped(), 4);
  EXPECT_TRUE(s.update(1.0));
  EXPECT_EQ(s.good_run(), 1) << "an overflow restarts the clean run";
}

TEST(LossScaler, RejectsBadOptions) {
  LossScalerOptions o;
  o.init_scale = 0.5;  // below min_scale 1
  EXPECT_THROW(LossScaler{o}, Error);
  o = {};
  o.growth_interval = 0;
  EXPECT_THROW(LossScaler{o}, Error);
}

namespace {
ByteText text() {
  std::string s;
  for (int i = 0; i < 300; ++i) s += "pack my box with five dozen liquor jugs " + std::to_string(i % 13);
  return ByteText(std::vector<uint8_t>(s.begin(), s.end()), 8, "pangram");
}

// A byte-level GPT of `layers` blocks, width 16, 2 heads, 8-byte context.
GptConfig tiny(int64_t layers) {
  GptConfig c;
  c.context = 8;
  c.layers = layers;
  c.dim = 16;
  c.heads = 2;
  return c;
}

// Passes x through; at backward of step `poison_step` it writes +inf into
// dL/dx, as an fp16 overflow in a layer would.
class Poison : public Module {
 public:
  explicit Poison(int64_t poison_step) : Module("poison"), poison_step_(poison_step) {}
  const Tensor& forward(const Tensor& x, Context&) override { return x; }
  const Tensor& backward(const Tensor& dy, Context& ctx) override {
    dx_ = dy;
    if (ctx.step == poison_step_) dx_.f32()[0] = std::numeric_limits<float>::infinity();
    return dx_;
  }

 private:
  int64_t poison_step_;
  Tensor dx_;
};

// fp16 loss scaling from `init`, doubling after `growth` clean steps; 8 rows a step.
TrainOptions scaled(double init, int64_t growth) {
  TrainOptions o;
  o.global_batch = 8;
  o.loss_scaling = true;
  o.scaler.init_scale = init;
  o.scaler.growth_interval = growth;
  return o;
}

std::vector<float> snapshot(const std::vector<Parameter*>& ps) {
  std::vector<float> v;
  for (Parameter* p : ps) v.insert(v.end(), p->data.f32(), p->data.f32() + p->size());
  return v;
}
}  // namespace

TEST(LossScaling, Fp16TrainerSkipsTheOverflowedStepAndRecovers) {
  set_compute_precision(Precision::kF16);
  ByteText data = text();
  auto model = make_gpt(tiny(2), 1);
  // Poison sits after the logits: its inf reaches every gradient.
  model->emplace<Poison>(4);
  AdamW opt(0.9f, 0.999f, 1e-8f, 0.0f);
  Trainer t(*model, data, opt, LrSchedule{3e-3f}, scaled(1024, 10));
  const auto params = t.parameters();
  std::vector<StepStats> st;
  std::vector<float> before_poison;
  for (int i = 0; i < 40; ++i) {
    if (i == 4) before_poison = snapshot(params);
    st.push_back(t.step());
    if (i == 4) {
      EXPECT_TRUE(st.back().skipped) << "the injected inf must skip the step";
      EXPECT_EQ(snapshot(params), before_poison) << "a skipped step must not move a weight";
    } else {
      EXPECT_FALSE(st.back().skipped) << "step " << i;
    }
  }
  set_compute_precision(Precision::kF32);
  // 1024 for steps 0–4, 512 after the skip, then doubling after every 10
  // clean steps: 1024 from step 15, 2048 from step 25.
  EXPECT_EQ(st[4].loss_scale, 1024);
  EXPECT_EQ(st[5].loss_scale, 512);
  EXPECT_EQ(st[14].loss_scale, 512);
  EXPECT_EQ(st[15].loss_scale, 1024);
  EXPECT_EQ(st[25].loss_scale, 2048);
  EXPECT_EQ(t.loss_scaler().skipped(), 1);
  for (const StepStats& s : st) EXPECT_TRUE(std::isfinite(s.loss));
  for (float w : snapshot(params)) ASSERT_TRUE(std::isfinite(w));
  EXPECT_LT(st.back().loss, st[0].loss * 0.8) << "training recovers after the overflow";
}

TEST(LossScaling, UnscaledUpdateEqualsTheUnscaledRun) {
  // fp32 compute, scale 2^10: dividing by a power of two is exact, so the
  // weights after a few steps equal the run without scaling (to the
  // 1e-6/norm of the unscaling multiply).
  ByteText data = text();
  std::vector<float> w[2];
  for (int scaled = 0; scaled < 2; ++scaled) {
    auto model = make_gpt(tiny(1), 3);
    Sgd opt(0.9f);
    TrainOptions o;
    o.global_batch = 8;
    o.loss_scaling = scaled == 1;
    o.scaler.init_scale = 1024;
    Trainer t(*model, data, opt, LrSchedule{0.05f}, o);
    for (int i = 0; i < 5; ++i) t.step();
    w[scaled] = snapshot(t.parameters());
  }
  ASSERT_EQ(w[0].size(), w[1].size());
  for (size_t i = 0; i < w[0].size(); ++i)
    ASSERT_NEAR(w[1][i], w[0][i], 1e-5 * (std::fabs(w[0][i]) + 1e-2)) << "element " << i;
}

TEST(LossScaling, ACheckpointCarriesTheScaleAcrossAResume) {
  // fp16 with an overflow at step 3 (scale 1024 -> 512) and a growth
  // interval of 4: saved after step 6, the scale is 512 with a clean run
  // of 3, so the resumed run must double it at step 8 exactly as the
  // uninterrupted run does, and take the same steps.
  set_compute_precision(Precision::kF16);
  const std::string path = ::testing::TempDir() + "/loss_scale.ckpt";
  auto run = [&](int from, int to, bool save_at_end, bool load_first) {
    ByteText data = text();
    auto model = make_gpt(tiny(1), 5);
    model->emplace<Poison>(3);
    AdamW opt(0.9f, 0.999f, 1e-8f, 0.0f);
    Trainer t(*model, data, opt, LrSchedule{3e-3f}, scaled(1024, 4));
    if (load_first) t.load(path);
    EXPECT_EQ(t.next_step(), from);
    std::vector<StepStats> st;
    for (int i = from; i < to; ++i) st.push_back(t.step());
    if (save_at_end) t.save(path);
    return std::make_pair(st, snapshot(t.parameters()));
  };
  const auto whole = run(0, 12, false, false);
  const auto first = run(0, 7, true, false);
  const auto second = run(7, 12, false, true);
  set_compute_precision(Precision::kF32);
  ASSERT_EQ(whole.first.size(), 12u);
  EXPECT_EQ(first.first[6].loss_scale, 512) << "the overflow halved it";
  for (size_t i = 0; i < second.first.size(); ++i) {
    EXPECT_EQ(second.first[i].loss_scale, whole.first[7 + i].loss_scale) << "step " << 7 + i;
    EXPECT_EQ(second.first[i].loss, whole.first[7 + i].loss) << "step " << 7 + i;
  }
  EXPECT_EQ(whole.first[8].loss_scale, 1024) << "doubled after 4 clean steps (4-7)";
  EXPECT_EQ(second.second, whole.second);
}
