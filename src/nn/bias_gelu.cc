// Fused bias + GELU forward and backward (bias_gelu.h).
#include "../tensor/simd.h"  // first: sets vectorisation options
#include "nn/bias_gelu.h"

#include <omp.h>

#include <algorithm>
#include <vector>

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

void bias_gelu_backward(const float* pre, const float* dout, float* dpre, float* bias_grad,
                        int64_t rows, int64_t cols) {
  if (rows * cols < kParallelMin || omp_get_max_threads() == 1 || omp_in_parallel()) {
    bwd_rows(pre, dout, dpre, bias_grad, rows, cols);
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
    bwd_rows(pre + r0 * cols, dout + r0 * cols, dpre + r0 * cols, partial.data() + t * cols,
             r1 - r0, cols);
  }
  for (int t = 0; t < used; ++t) {
    const float* p = partial.data() + size_t(t) * size_t(cols);
    for (int64_t c = 0; c < cols; ++c) bias_grad[c] += p[c];
  }
}

}  // namespace braid::nn
