// Internal: helpers for loops that the compiler vectorises.
//
// Include this header FIRST in a kernel file: the pragma below applies to
// the rest of the translation unit. Without it GCC will not if-convert the
// float selects (clamps, ternaries) in our loops under -ftrapping-math, and
// those loops stay scalar. We never rely on floating-point traps.
#pragma once
#pragma GCC optimize("no-trapping-math")

#include <cmath>
#include <cstdint>
#include <cstring>

// Compile a function twice (x86-64-v3: AVX2+FMA, and baseline x86-64); the
// loader picks by CPU features. Not under ThreadSanitizer: the loader runs
// the clones' resolvers before the TSan runtime is up, and an instrumented
// resolver crashes the program at start.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define BRAID_SIMD_FN __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define BRAID_SIMD_FN
#endif

namespace braid::simd {

// exp(x) via 2^(x·log2 e): split into integer n and fraction f in
// [-0.5, 0.5], a degree-6 polynomial for 2^f, and n added to the exponent
// bits. Branch-free so loops using it vectorise. Clamped to [-87.3, 88.3].
inline float exp_approx(float x) {
  x = x < -87.3f ? -87.3f : (x > 88.3f ? 88.3f : x);
  float t = x * 1.44269504088896341f;
  // Round to nearest by the 1.5·2^23 trick (vectorises without SSE4.1).
  float n = (t + 12582912.0f) - 12582912.0f;
  // Cody-Waite: r = x - n·ln2 in two parts for accuracy.
  float r = x - n * 0.693145751953125f;
  r = r - n * 1.428606765330187045e-06f;
  // Taylor/minimax-ish polynomial for e^r, r in [-0.347, 0.347].
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  int32_t e = (int32_t(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &e, 4);
  return p * scale;
}

// tanh(x) = 1 - 2 / (e^{2x} + 1); for small |x| use the odd series to keep
// relative accuracy near 0.
inline float tanh_approx(float x) {
  float ax = std::fabs(x);
  float e = exp_approx(2.0f * ax);
  float big = 1.0f - 2.0f / (e + 1.0f);
  float x2 = x * x;
  float small = ax * (1.0f + x2 * (-1.0f / 3.0f + x2 * (2.0f / 15.0f + x2 * (-17.0f / 315.0f))));
  float r = ax < 0.0625f ? small : big;
  return std::copysign(r, x);
}

}  // namespace braid::simd

#include <omp.h>

namespace braid::simd {

// Splits [0, n) into one contiguous range per OpenMP thread and calls
// f(begin, end) on each — in parallel only when n ≥ min_parallel. Kernels
// are written as BRAID_SIMD_FN functions over a range and called from f,
// because code outlined by `omp parallel` does not inherit target_clones.
template <class F>
void parallel_ranges(int64_t n, int64_t min_parallel, F&& f) {
  if (n < min_parallel || omp_get_max_threads() == 1 || omp_in_parallel()) {
    f(int64_t(0), n);
    return;
  }
#pragma omp parallel
  {
    int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    int64_t b = n * t / nt, e = n * (t + 1) / nt;
    if (b < e) f(b, e);
  }
}

}  // namespace braid::simd
