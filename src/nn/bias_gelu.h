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

}  // namespace braid::nn
