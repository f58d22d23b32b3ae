// The fused kernels against their unfused paths: Linear with its GELU
// fused (Linear::Activation::kGelu) against Linear then GELU — output,
// input gradient, weight and bias gradients — on one thread and on two
// (rows split, per-thread bias sums), in fp32 and bf16 compute.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "braid/error.h"
#include "braid/layers.h"
#include "braid/precision.h"
#include "braid/threads.h"

using namespace braid;
using namespace braid::nn;

namespace {

void fill(Tensor& t, uint32_t seed) {
  uint32_t s = seed * 2654435761u + 7;
  for (int64_t i = 0; i < t.numel(); ++i) {
    s = s * 1664525u + 1013904223u;
    t.f32()[i] = (float(s >> 8) / float(1 << 24) - 0.5f) * 2.0f;
  }
}

// Largest |a − b| / (|b| + 1e-3) over the elements.
double rel_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.numel(), b.numel());
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    m = std::max(m, std::fabs(double(a.f32()[i]) - b.f32()[i]) / (std::fabs(b.f32()[i]) + 1e-3));
  return m;
}

void check_fused_against_unfused(int64_t rows, int threads, Precision p, double tol) {
  set_num_threads(threads);
  set_compute_precision(p);
  const int64_t in = 48, out = 96;
  Linear fused("fused", in, out), plain("plain", in, out);
  GELU act("act");
  fused.set_activation(Linear::Activation::kGelu);
  fill(plain.weight().data, 1);
  fill(plain.bias()->data, 2);
  fused.weight().data.copy_from(plain.weight().data);
  fused.bias()->data.copy_from(plain.bias()->data);
  Tensor x({rows, in}), dy({rows, out});
  fill(x, 3);
  fill(dy, 4);
  Context ctx;
  const Tensor& yf = fused.forward(x, ctx);
  const Tensor& yu = act.forward(plain.forward(x, ctx), ctx);
  const Tensor& dxf = fused.backward(dy, ctx);
  const Tensor& dpre = act.backward(dy, ctx);
  const Tensor& dxu = plain.backward(dpre, ctx);
  set_compute_precision(Precision::kF32);
  set_num_threads(1);
  const std::string at = std::string(precision_name(p)) + ", rows " + std::to_string(rows) +
                         ", threads " + std::to_string(threads);
  EXPECT_LE(rel_diff(yf, yu), tol) << "output, " << at;
  EXPECT_LE(rel_diff(dxf, dxu), tol) << "dx, " << at;
  EXPECT_LE(rel_diff(fused.weight().grad, plain.weight().grad), tol) << "dW, " << at;
  // The bias gradient is a sum over the rows, which the two paths add in
  // another order (per thread): its rounding is relative to Σ|terms|.
  for (int64_t c = 0; c < out; ++c) {
    double mag = 0;
    for (int64_t r = 0; r < rows; ++r) mag += std::fabs(dpre.f32()[r * out + c]);
    EXPECT_LE(std::fabs(fused.bias()->grad.f32()[c] - plain.bias()->grad.f32()[c]), tol * mag)
        << "db[" << c << "], " << at;
  }
  // And the fused output is GELU's, not the pre-activation.
  double max_out = 0;
  for (int64_t i = 0; i < yf.numel(); ++i) max_out = std::max(max_out, double(yf.f32()[i]));
  EXPECT_GT(max_out, 0.0);
  for (int64_t i = 0; i < yf.numel(); ++i) ASSERT_GE(yf.f32()[i], -0.2f) << "GELU ≥ −0.17";
}

}  // namespace

// Sums in another order (the bias after the GEMM, not before; the bias
// gradient per thread): f32 rounding, 1e-5 relative with room.
TEST(FusedBiasGelu, MatchesLinearThenGeluOnOneThread) {
  check_fused_against_unfused(64, 1, Precision::kF32, 1e-5);
}
TEST(FusedBiasGelu, MatchesLinearThenGeluOnTwoThreads) {
  // 1024 × 96 outputs: above the size where the rows split over threads.
  check_fused_against_unfused(1024, 2, Precision::kF32, 1e-5);
}
TEST(FusedBiasGelu, MatchesLinearThenGeluInBf16) {
  // Both paths round the same operands to bf16; the outputs differ by the
  // f32 order of the bias add only.
  check_fused_against_unfused(1024, 2, Precision::kBF16, 1e-4);
}

TEST(FusedBiasGelu, NeedsTheBias) {
  Linear no_bias("nb", 4, 4, false);
  EXPECT_THROW(no_bias.set_activation(Linear::Activation::kGelu), Error);
}
