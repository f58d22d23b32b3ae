// Activations kept in bf16 under Precision::kBF16 (precision.h's
// activation_dtype()), against the same bf16 run with them kept in f32
// (set_bf16_activations(false)), with and without recomputation, with
// dropout. Kept in bf16: the layer-norm outputs, attention's q, k, v, P,
// output, dS and the gradients of its output and input, the MLP's
// pre-GELU, GELU output, dL/d(pre-GELU) and the gradients of its output
// and input.
//
// What changes, and the tolerances. Every forward tensor kept in bf16 is
// read by GEMMs alone, which round it to bf16 anyway, so the forward and
// the loss are bit for bit the same. In the backward some are read
// elsewhere too, rounded to 2^-9 relative where they were f32: P in
// softmax's backward, pre-GELU in GELU', the gradients reaching GELU's and
// layer norm's backward and the qkv bias. Each parameter's gradient takes
// a handful of such roundings: bound 2e-2 relative (L2; seen: ~1e-2); a
// wrong or missing dS, dv, dq or GELU' moves it by order 1.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "braid/error.h"
#include "braid/loss.h"
#include "braid/models.h"
#include "braid/precision.h"
#include "braid/tensor.h"
#include "braid/threads.h"

using namespace braid;
using namespace braid::nn;

namespace {

struct StepResult {
  double loss = 0;
  std::vector<Tensor> grads;
  size_t peak = 0;  // tensor bytes of the forward and backward, over the model's
};

// One forward and backward of a small GPT in bf16 on fixed tokens.
struct Shape3 {
  int64_t batch, context, dim;
};
constexpr Shape3 kSmall{4, 32, 64};
// Rows × d_model beyond the 2^18-element scratch blocks (wide_scratch.h):
// the kept products and layer norms run a block of rows at a time.
constexpr Shape3 kBlocked{32, 128, 160};

StepResult gpt_step(bool bf16_activations, bool recompute, Shape3 shape = kSmall) {
  set_compute_precision(Precision::kBF16);
  set_bf16_activations(bf16_activations);
  set_num_threads(2);
  GptConfig c;
  c.context = shape.context;
  c.layers = 2;
  c.dim = shape.dim;
  c.heads = 4;
  c.dropout = 0.1f;
  c.recompute = recompute;
  auto m = make_gpt(c, 7);
  const int64_t B = shape.batch;
  Tensor x({B, c.context}, DType::kI32), y({B, c.context}, DType::kI32);
  for (int64_t i = 0; i < x.numel(); ++i) {
    x.i32()[i] = int32_t((i * 37 + 11) % 256);
    y.i32()[i] = int32_t((i * 53 + 5) % 256);
  }
  Context ctx;
  ctx.seed = 3;
  ctx.step = 1;
  SoftmaxCrossEntropy ce;
  zero_grad(m->parameters());
  const size_t base = tensor_bytes_in_use();
  reset_tensor_peak_bytes();
  StepResult r;
  r.loss = ce.forward(m->forward(x, ctx), y);
  m->backward(ce.backward(1.0f / float(B * c.context)), ctx);
  r.peak = tensor_peak_bytes() - base;
  for (Parameter* p : m->parameters()) r.grads.push_back(p->grad);
  set_bf16_activations(true);
  set_compute_precision(Precision::kF32);
  set_num_threads(1);
  return r;
}

void expect_close(bool recompute, Shape3 shape = kSmall) {
  const StepResult kept = gpt_step(true, recompute, shape);
  const StepResult wide = gpt_step(false, recompute, shape);
  const std::string what = std::string(recompute ? "with recomputation" : "stored activations") +
                           ", " + std::to_string(shape.batch * shape.context) + " rows";
  EXPECT_EQ(std::memcmp(&kept.loss, &wide.loss, sizeof(double)), 0)
      << what << ": loss " << kept.loss << " vs " << wide.loss;
  ASSERT_EQ(kept.grads.size(), wide.grads.size());
  ASSERT_FALSE(kept.grads.empty());
  double worst = 0;
  for (size_t i = 0; i < kept.grads.size(); ++i) {
    double diff = 0, norm = 0;
    for (int64_t j = 0; j < kept.grads[i].numel(); ++j) {
      const double a = kept.grads[i].f32()[j], b = wide.grads[i].f32()[j];
      diff += (a - b) * (a - b);
      norm += b * b;
    }
    ASSERT_GT(norm, 0) << what << ": gradient " << i << " is zero";
    const double rel = std::sqrt(diff / norm);
    EXPECT_LT(rel, 2e-2) << what << ": gradient " << i;
    worst = std::max(worst, rel);
  }
  std::printf("%s: loss %.9g vs %.9g, largest relative gradient difference %.2e\n", what.c_str(),
              kept.loss, wide.loss, worst);
  // The bf16 storage really happened: the step held fewer bytes.
  EXPECT_LT(kept.peak, wide.peak) << what;
  std::printf("%s: peak step bytes %zu (bf16 activations) vs %zu (f32)\n", what.c_str(), kept.peak,
              wide.peak);
}

}  // namespace

TEST(Bf16Activations, SameLossCloseGradientsToF32Storage) { expect_close(false); }

TEST(Bf16Activations, SameLossCloseGradientsWithRecomputation) { expect_close(true); }

TEST(Bf16Activations, SameLossCloseGradientsInRowBlocks) { expect_close(false, kBlocked); }

TEST(Bf16Activations, OnlyUnderBf16) {
  set_bf16_activations(true);
  set_compute_precision(Precision::kF32);
  EXPECT_EQ(activation_dtype(), DType::kF32);
  set_compute_precision(Precision::kF16);
  EXPECT_EQ(activation_dtype(), DType::kF32);
  set_compute_precision(Precision::kBF16);
  EXPECT_EQ(activation_dtype(), DType::kBF16);
  set_bf16_activations(false);
  EXPECT_EQ(activation_dtype(), DType::kF32);
  set_bf16_activations(true);
  set_compute_precision(Precision::kF32);
}

// A bf16 operand given to gemm_compute is the f32 operand it was rounded
// from, in every precision (widened exactly outside bf16).
TEST(Bf16Activations, GemmTakesAnAlreadyRoundedOperand) {
  const int64_t m = 5, n = 7, k = 9;
  std::vector<float> a(m * k), b(k * n);
  for (size_t i = 0; i < a.size(); ++i) a[i] = 0.37f * float(i % 11) - 1.3f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = 0.21f * float(i % 7) - 0.6f;
  std::vector<uint16_t> a16(a.size());
  round_rows_to_bf16(a.data(), m, k, k, a16.data(), k);
  std::vector<float> a_rounded(a.size());
  convert_bf16_to_f32(a16.data(), a_rounded.data(), a.size());
  for (Precision p : {Precision::kBF16, Precision::kF32, Precision::kF16}) {
    set_compute_precision(p);
    std::vector<float> c1(m * n), c2(m * n);
    gemm_compute(false, false, m, n, k, 1.0f, GemmOperand{a16.data(), DType::kBF16, k},
                 gemm_operand(b.data(), n), 0.0f, c1.data(), n);
    gemm_compute(false, false, m, n, k, 1.0f, (p == Precision::kBF16 ? a : a_rounded).data(), k,
                 b.data(), n, 0.0f, c2.data(), n);
    EXPECT_EQ(std::memcmp(c1.data(), c2.data(), c1.size() * sizeof(float)), 0) << precision_name(p);
  }
  set_compute_precision(Precision::kF32);
  EXPECT_THROW(gemm_compute(false, false, m, n, k, 1.0f, GemmOperand{a16.data(), DType::kI32, k},
                            gemm_operand(b.data(), n), 0.0f, std::vector<float>(m * n).data(), n),
               Error);
}
