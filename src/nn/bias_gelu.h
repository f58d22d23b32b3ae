// Internal: the fused bias + GELU of a Linear layer (Linear::Activation::
// kGelu, layers.h), forward and backward, each one pass over the layer's
// [rows, cols] output where the unfused Linear then GELU take two:
//   forward:  pre[r, c] += b[c]; out[r, c] = GELU(pre[r, c])
//             (unfused: the bias written into the output before the GEMM,
//             which then reads it back; GELU a second pass)
//   backward: dpre = dout ⊙ GELU'(pre); bias_grad[c] += Σ_r dpre[r, c]
//             (unfused: GELU's backward, then the bias's column sum over
//             the same dpre)
// Rows split over the threads; the bias gradient is summed per thread and
// the partial sums added in thread order, so the result does not depend on
// timing (it does on the thread count, as any parallel sum).
#pragma once

#include <cstdint>

namespace braid::nn {

void bias_gelu_forward(float* pre, const float* b, float* out, int64_t rows, int64_t cols);
void bias_gelu_backward(const float* pre, const float* dout, float* dpre, float* bias_grad,
                        int64_t rows, int64_t cols);

// The same with pre, out and dpre kept in bf16 (precision.h's
// round_rows_to_bf16 of the f32 values above, computed a block of rows at
// a time in per-thread scratch): forward leaves the GEMM's f32 product in
// pre32 with the bias added and writes pre16 and out16; backward reads
// pre16 (widened), so GELU' is taken at the rounded pre — the one change
// from the f32 functions, whose out, dpre and bias_grad these otherwise
// equal bit for bit.
void bias_gelu_forward_bf16(float* pre32, const float* b, uint16_t* pre16, uint16_t* out16,
                            int64_t rows, int64_t cols);
// dout is f32, or bf16 (widened) when dout16 is given instead (dout null).
void bias_gelu_backward_bf16(const uint16_t* pre16, const float* dout, const uint16_t* dout16,
                             uint16_t* dpre16, float* bias_grad, int64_t rows, int64_t cols);

}  // namespace braid::nn
