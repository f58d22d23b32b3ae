#include "simd.h"  // first: sets vectorisation options
#include "braid/kernels.h"

#include <cblas.h>
#include <omp.h>

#include <string>

#include "braid/error.h"

namespace braid {

std::string blas_core() {
  const char* c = openblas_get_corename();
  return c != nullptr ? c : "";
}

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
          const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
          int64_t ldc) {
  if (m == 0 || n == 0) return;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, blasint(m), blasint(n), blasint(k), alpha, a,
              blasint(lda), b, blasint(ldb), beta, c, blasint(ldc));
}

// The OpenMP build of OpenBLAS (openblas_get_parallel() == 2) already runs
// single-threaded inside a parallel region, and its openblas_set_num_threads
// also calls omp_set_num_threads — which would make the caller's next
// `omp parallel` region run on one thread. So only the pthreads build needs
// (and gets) the switch.
BlasSingleThreaded::BlasSingleThreaded() : saved_(1) {
  if (openblas_get_parallel() == 2) return;
  saved_ = openblas_get_num_threads();
  if (saved_ != 1) openblas_set_num_threads(1);
}
BlasSingleThreaded::~BlasSingleThreaded() {
  if (saved_ != 1) openblas_set_num_threads(saved_);
}

BRAID_SIMD_FN void vexp(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = simd::exp_approx(x[i]);
}

BRAID_SIMD_FN void vadd_inplace(float* out, const float* a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] += a[i];
}

namespace {
BRAID_SIMD_FN void vadd_range(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}
}  // namespace

void vadd(const float* a, const float* b, float* out, int64_t n) {
  simd::parallel_ranges(n, int64_t(1) << 17,
                        [&](int64_t s, int64_t e) { vadd_range(a + s, b + s, out + s, e - s); });
}

BRAID_SIMD_FN void col_sum_acc(const float* a, int64_t rows, int64_t cols, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = a + r * cols;
    for (int64_t c = 0; c < cols; ++c) out[c] += row[c];
  }
}

// Eight running sums, so the loop is eight independent dependency chains
// the compiler turns into vector lanes (one chain would be bound by the
// latency of a double add: ~1 ms for the MLP's 670k gradients).
BRAID_SIMD_FN double sum_squares(const float* a, int64_t n) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += double(a[i + j]) * double(a[i + j]);
  double s = 0;
  for (; i < n; ++i) s += double(a[i]) * double(a[i]);
  for (int j = 0; j < 8; ++j) s += acc[j];
  return s;
}

}  // namespace braid
