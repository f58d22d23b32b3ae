// Compute kernels shared by the layers: threads, GEMM, a few vector loops.
//
// Row-major throughout. GEMMs go to CBLAS (OpenBLAS) with the transposes
// expressed as flags, never as copies. Elementwise loops are compiled twice
// (AVX2+FMA and baseline) and picked at load time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "braid/threads.h"  // set_num_threads, and the runtime the threads run on

namespace braid {

// The GEMM kernel set OpenBLAS chose when it was loaded ("Haswell",
// "SkylakeX", ...), for logs: OPENBLAS_CORETYPE overrides its choice.
std::string blas_core();

// C[m,n] = alpha * op(A)[m,k] · op(B)[k,n] + beta * C, row-major, with
// leading dimensions (row strides) lda, ldb, ldc. op(X) = X or Xᵀ.
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
          const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
          int64_t ldc);

// bf16 GEMM with f32 accumulate and output (src/tensor/bf16_gemm.cc):
// C[m,n] = alpha * op(A) · op(B) + beta * C, A and B bf16 bit patterns
// (dtype.h), C f32, row-major with leading dimensions as gemm's. Runs on
// oneDNN's bf16 matmul where the CPU has AVX512-BF16 (bf16_gemm_native()),
// else on gemm_bf16_widened (the note "bf16 GEMM: no AVX512-BF16 on this
// CPU; widening to f32" is logged once): the same products and sums either
// way, since every bf16 value is exact in f32.
void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta,
               float* c, int64_t ldc);
// The fallback: widens A and B to f32 and calls gemm (slower, never wrong).
void gemm_bf16_widened(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                       const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb,
                       float beta, float* c, int64_t ldc);
// Whether gemm_bf16 runs natively in bf16 (the CPU has AVX512-BF16).
bool bf16_gemm_native();

// RAII: OpenBLAS runs single-threaded while alive (for GEMMs issued from
// inside an OpenMP parallel loop); restores the previous count after. A
// no-op with the OpenMP build of OpenBLAS, which is single-threaded inside
// parallel regions anyway (and whose thread setter would also shrink the
// OpenMP team of the region that follows).
class BlasSingleThreaded {
 public:
  BlasSingleThreaded();
  ~BlasSingleThreaded();
  BlasSingleThreaded(const BlasSingleThreaded&) = delete;
  BlasSingleThreaded& operator=(const BlasSingleThreaded&) = delete;

 private:
  int saved_;
};

// Vectorisable exp and tanh, relative error ≤ ~2e-7 over the f32 range
// that matters for softmax and GELU (exp of x < -87 is 0).
void vexp(const float* x, float* y, int64_t n);

// out[i] += a[i] over n elements.
void vadd_inplace(float* out, const float* a, int64_t n);
// out[i] = a[i] + b[i] (one pass; out may alias a or b). Both threads when large.
void vadd(const float* a, const float* b, float* out, int64_t n);
// Σ over rows of a [rows, cols] matrix into out[cols] (out += ...).
void col_sum_acc(const float* a, int64_t rows, int64_t cols, float* out);

// Sum of squares in double (for gradient norms).
double sum_squares(const float* a, int64_t n);

}  // namespace braid
