// Fused bias + GELU forward and backward (bias_gelu.h).
#include "../tensor/simd.h"  // first: sets vectorisation options
#include "nn/bias_gelu.h"

#include <omp.h>

#include <algorithm>
#include <vector>

#include "braid/dtype.h"
#include "braid/precision.h"
#include "nn/gelu.h"

namespace braid::nn {

namespace {
// Below ~64K elements a second thread costs more than it gives.
constexpr int64_t kParallelMin = 1 << 16;

BRAID_SIMD_FN void fwd_rows(float* pre, const float* b, float* out, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    float* p = pre + r * cols;
    float* o = out + r * cols;
    for (int64_t c = 0; c < cols; ++c) {
      const float v = p[c] + b[c];
      p[c] = v;
      o[c] = gelu::value(v);
    }
  }
}

BRAID_SIMD_FN void bwd_rows(const float* pre, const float* dout, float* dpre, float* bg,
                            int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* p = pre + r * cols;
    const float* d = dout + r * cols;
    float* dp = dpre + r * cols;
    for (int64_t c = 0; c < cols; ++c) {
      const float g = d[c] * gelu::grad(p[c]);
      dp[c] = g;
      bg[c] += g;
    }
  }
}

// Rows per block of the bf16 variants' per-thread scratch.
constexpr int64_t kBlockRows = 16;

float* block_scratch(int which, int64_t cols) {
  thread_local std::vector<float> buf[2];
  if (buf[which].size() < size_t(kBlockRows * cols)) buf[which].resize(size_t(kBlockRows * cols));
  return buf[which].data();
}

void fwd_rows_bf16(float* pre, const float* b, uint16_t* pre16, uint16_t* out16, int64_t rows,
                   int64_t cols) {
  float* out = block_scratch(0, cols);
  for (int64_t r0 = 0; r0 < rows; r0 += kBlockRows) {
    const int64_t n = std::min(kBlockRows, rows - r0);
    fwd_rows(pre + r0 * cols, b, out, n, cols);
    round_rows_to_bf16(pre + r0 * cols, n, cols, cols, pre16 + r0 * cols, cols);
    round_rows_to_bf16(out, n, cols, cols, out16 + r0 * cols, cols);
  }
}

void bwd_rows_bf16(const uint16_t* pre16, const float* dout, const uint16_t* dout16,
                   uint16_t* dpre16, float* bg, int64_t rows, int64_t cols) {
  float* w = block_scratch(0, cols);
  float* d = block_scratch(1, cols);
  for (int64_t r0 = 0; r0 < rows; r0 += kBlockRows) {
    const int64_t n = std::min(kBlockRows, rows - r0);
    convert_bf16_to_f32(pre16 + r0 * cols, w, size_t(n * cols));
    const float* dr = dout ? dout + r0 * cols : d;
    if (!dout) convert_bf16_to_f32(dout16 + r0 * cols, d, size_t(n * cols));
    bwd_rows(w, dr, w, bg, n, cols);  // in place, element by element
    round_rows_to_bf16(w, n, cols, cols, dpre16 + r0 * cols, cols);
  }
}

// Rows [first, last) of thread t of n.
void row_range(int64_t rows, int t, int n, int64_t& first, int64_t& last) {
  first = rows * t / n;
  last = rows * (t + 1) / n;
}
}  // namespace

void bias_gelu_forward(float* pre, const float* b, float* out, int64_t rows, int64_t cols) {
  if (rows * cols < kParallelMin || omp_get_max_threads() == 1 || omp_in_parallel()) {
    fwd_rows(pre, b, out, rows, cols);
    return;
  }
#pragma omp parallel
  {
    int64_t r0, r1;
    row_range(rows, omp_get_thread_num(), omp_get_num_threads(), r0, r1);
    fwd_rows(pre + r0 * cols, b, out + r0 * cols, r1 - r0, cols);
  }
}

namespace {
// The backward's thread split and per-thread bias sums around
// rows(first row, row count, that thread's bias sum).
template <class Rows>
void backward_split(float* bias_grad, int64_t rows, int64_t cols, const Rows& run) {
  if (rows * cols < kParallelMin || omp_get_max_threads() == 1 || omp_in_parallel()) {
    run(0, rows, bias_grad);
    return;
  }
  const int n = omp_get_max_threads();
  std::vector<float> partial(size_t(n) * size_t(cols), 0.0f);
  int used = 1;
#pragma omp parallel num_threads(n)
  {
    const int t = omp_get_thread_num();
#pragma omp single
    used = omp_get_num_threads();
    int64_t r0, r1;
    row_range(rows, t, used, r0, r1);
    run(r0, r1 - r0, partial.data() + t * cols);
  }
  for (int t = 0; t < used; ++t) {
    const float* p = partial.data() + size_t(t) * size_t(cols);
    for (int64_t c = 0; c < cols; ++c) bias_grad[c] += p[c];
  }
}
}  // namespace

void bias_gelu_backward(const float* pre, const float* dout, float* dpre, float* bias_grad,
                        int64_t rows, int64_t cols) {
  backward_split(bias_grad, rows, cols, [&](int64_t r0, int64_t n, float* bg) {
    bwd_rows(pre + r0 * cols, dout + r0 * cols, dpre + r0 * cols, bg, n, cols);
  });
}

void bias_gelu_backward_bf16(const uint16_t* pre16, const float* dout, const uint16_t* dout16,
                             uint16_t* dpre16, float* bias_grad, int64_t rows, int64_t cols) {
  backward_split(bias_grad, rows, cols, [&](int64_t r0, int64_t n, float* bg) {
    bwd_rows_bf16(pre16 + r0 * cols, dout ? dout + r0 * cols : nullptr,
                  dout ? nullptr : dout16 + r0 * cols, dpre16 + r0 * cols, bg, n, cols);
  });
}

void bias_gelu_forward_bf16(float* pre32, const float* b, uint16_t* pre16, uint16_t* out16,
                            int64_t rows, int64_t cols) {
  if (rows * cols < kParallelMin || omp_get_max_threads() == 1 || omp_in_parallel()) {
    fwd_rows_bf16(pre32, b, pre16, out16, rows, cols);
    return;
  }
#pragma omp parallel
  {
    int64_t r0, r1;
    row_range(rows, omp_get_thread_num(), omp_get_num_threads(), r0, r1);
    fwd_rows_bf16(pre32 + r0 * cols, b, pre16 + r0 * cols, out16 + r0 * cols, r1 - r0, cols);
  }
}

}  // namespace braid::nn
