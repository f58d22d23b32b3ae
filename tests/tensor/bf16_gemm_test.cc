// gemm_bf16 (oneDNN, and its widened fallback) and gemm_compute in each
// precision against a double-precision reference of the same product.
//
// Tolerances, from the formats:
//  - with operands already in the format, only the f32 accumulation
//    differs from the exact sum: |c − ref| ≤ 1e-5 · Σ|a·b| (k ≤ 512 sums of
//    f32 rounding 6e-8 each, with margin);
//  - with f32 operands rounded to bf16 (8-bit mantissa, relative 2^-9 each),
//    |c − ref| ≤ 2·2^-9 · Σ|a·b| plus the accumulation term above; f16
//    (11-bit mantissa) likewise with 2^-12.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "braid/dtype.h"
#include "braid/error.h"
#include "braid/kernels.h"
#include "braid/precision.h"

using namespace braid;

namespace {

struct Case {
  bool ta, tb;
  int64_t m, n, k;
  float alpha, beta;
};

// Values of mixed sign and magnitude, deterministic.
std::vector<float> values(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  uint32_t s = seed * 2654435761u + 1;
  for (auto& x : v) {
    s = s * 1664525u + 1013904223u;
    x = (float(s >> 8) / float(1 << 24) - 0.5f) * 2.0f;
  }
  return v;
}

// Reference C = alpha·op(A)·op(B) + beta·C in double, and Σ|alpha·a·b| + |beta·c| per entry.
void reference(const Case& c, const std::vector<float>& a, int64_t lda, const std::vector<float>& b,
               int64_t ldb, const std::vector<float>& c0, int64_t ldc, std::vector<double>& ref,
               std::vector<double>& mag) {
  ref.assign(size_t(c.m * c.n), 0);
  mag.assign(size_t(c.m * c.n), 0);
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < c.n; ++j) {
      double s = 0, g = 0;
      for (int64_t p = 0; p < c.k; ++p) {
        double av = c.ta ? a[p * lda + i] : a[i * lda + p];
        double bv = c.tb ? b[j * ldb + p] : b[p * ldb + j];
        s += av * bv;
        g += std::fabs(av * bv);
      }
      ref[i * c.n + j] = c.alpha * s + c.beta * c0[i * ldc + j];
      mag[i * c.n + j] = std::fabs(c.alpha) * g + std::fabs(c.beta * c0[i * ldc + j]) + 1e-30;
    }
}

const Case kCases[] = {
    {false, true, 37, 29, 64, 1.0f, 0.0f},   {false, false, 16, 48, 33, 0.5f, 1.0f},
    {true, false, 40, 24, 17, 1.0f, 1.0f},   {true, true, 9, 70, 128, 0.125f, 0.0f},
    {false, true, 128, 96, 512, 1.0f, 1.0f},
};

using Gemm16 = void (*)(bool, bool, int64_t, int64_t, int64_t, float, const uint16_t*, int64_t,
                        const uint16_t*, int64_t, float, float*, int64_t);

// Runs `g` on bf16 operands (with leading dimensions wider than the rows,
// as the attention's strided q, k, v) and checks it against the reference
// of the same bf16 values.
void check_bf16_kernel(Gemm16 g) {
  for (const Case& c : kCases) {
    const int64_t ar = c.ta ? c.k : c.m, ac = c.ta ? c.m : c.k;
    const int64_t br = c.tb ? c.n : c.k, bc = c.tb ? c.k : c.n;
    const int64_t lda = ac + 3, ldb = bc + 5, ldc = c.n + 2;
    std::vector<float> a = values(size_t(ar * lda), 1), b = values(size_t(br * ldb), 2);
    for (auto& x : a) x = bf16_to_f32(f32_to_bf16(x));
    for (auto& x : b) x = bf16_to_f32(f32_to_bf16(x));
    std::vector<uint16_t> a16(a.size()), b16(b.size());
    convert_f32_to_bf16(a.data(), a16.data(), a.size());
    convert_f32_to_bf16(b.data(), b16.data(), b.size());
    std::vector<float> cm = values(size_t(c.m * ldc), 3);
    std::vector<double> ref, mag;
    reference(c, a, lda, b, ldb, cm, ldc, ref, mag);
    g(c.ta, c.tb, c.m, c.n, c.k, c.alpha, a16.data(), lda, b16.data(), ldb, c.beta, cm.data(), ldc);
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j)
        ASSERT_LE(std::fabs(cm[i * ldc + j] - ref[i * c.n + j]), 1e-5 * mag[i * c.n + j])
            << "ta=" << c.ta << " tb=" << c.tb << " m=" << c.m << " n=" << c.n << " k=" << c.k
            << " at (" << i << ", " << j << ")";
  }
}

// gemm_compute in precision p on f32 operands: within the format's bound
// of the exact f32 product, and (for bf16, f16) not equal to sgemm's —
// the operands really were rounded.
void check_compute(Precision p, double unit) {
  set_compute_precision(p);
  double worst = 0;
  for (const Case& c : kCases) {
    const int64_t ar = c.ta ? c.k : c.m, ac = c.ta ? c.m : c.k;
    const int64_t br = c.tb ? c.n : c.k, bc = c.tb ? c.k : c.n;
    std::vector<float> a = values(size_t(ar * ac), 4), b = values(size_t(br * bc), 5);
    std::vector<float> cm = values(size_t(c.m * c.n), 6);
    std::vector<double> ref, mag;
    reference(c, a, ac, b, bc, cm, c.n, ref, mag);
    gemm_compute(c.ta, c.tb, c.m, c.n, c.k, c.alpha, a.data(), ac, b.data(), bc, c.beta, cm.data(),
                 c.n);
    for (size_t i = 0; i < ref.size(); ++i) {
      const double rel = std::fabs(cm[i] - ref[i]) / mag[i];
      ASSERT_LE(rel, 2 * unit + 1e-5) << precision_name(p) << " entry " << i;
      worst = std::max(worst, rel);
    }
  }
  set_compute_precision(Precision::kF32);
  if (p == Precision::kF32)
    EXPECT_LT(worst, 1e-5);
  else
    EXPECT_GT(worst, unit / 64) << precision_name(p) << ": the operands were not rounded";
}

}  // namespace

TEST(Bf16Gemm, OneDnnMatchesReferenceOfBf16Operands) {
  std::printf("AVX512-BF16 on this CPU: %s\n", bf16_gemm_native() ? "yes (oneDNN)" : "no (widened)");
  check_bf16_kernel(&gemm_bf16);
}

TEST(Bf16Gemm, WidenedFallbackMatchesReference) { check_bf16_kernel(&gemm_bf16_widened); }

TEST(Bf16Gemm, CachedPrimitiveRerunsWithNewData) {
  // Same shape twice (the second call reuses the cached primitive) with
  // different operands: the result follows the data.
  const int64_t m = 8, n = 8, k = 16;
  std::vector<uint16_t> a(m * k, f32_to_bf16(1.0f)), b(k * n, f32_to_bf16(2.0f));
  std::vector<float> c(m * n, 0);
  gemm_bf16(false, false, m, n, k, 1, a.data(), k, b.data(), n, 0, c.data(), n);
  EXPECT_EQ(c[0], 32.0f);
  std::fill(b.begin(), b.end(), f32_to_bf16(-0.5f));
  gemm_bf16(false, false, m, n, k, 1, a.data(), k, b.data(), n, 0, c.data(), n);
  EXPECT_EQ(c[5], -8.0f);
}

TEST(GemmCompute, Fp32IsSgemm) { check_compute(Precision::kF32, 0); }
TEST(GemmCompute, Bf16WithinFormatBound) { check_compute(Precision::kBF16, std::ldexp(1.0, -9)); }
TEST(GemmCompute, Fp16WithinFormatBound) { check_compute(Precision::kF16, std::ldexp(1.0, -12)); }

TEST(GemmCompute, Fp16OverflowsToInf) {
  // 1e5 is beyond f16's largest finite value (65504): the rounded operand
  // is inf, as on an f16 device, which is what loss scaling must catch.
  set_compute_precision(Precision::kF16);
  float a[1] = {1e5f}, b[1] = {1.0f}, c[1] = {0};
  gemm_compute(false, false, 1, 1, 1, 1, a, 1, b, 1, 0, c, 1);
  set_compute_precision(Precision::kF32);
  EXPECT_TRUE(std::isinf(c[0]));
}

TEST(Precision, ParsesNamesAndRejectsOthers) {
  EXPECT_EQ(parse_precision("bf16"), Precision::kBF16);
  EXPECT_EQ(parse_precision("fp16"), Precision::kF16);
  EXPECT_EQ(parse_precision("fp32"), Precision::kF32);
  try {
    parse_precision("int8");
    FAIL() << "int8 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("int8"), std::string::npos);
  }
}
