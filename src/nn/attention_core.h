// Internal: the causal attention core on a fused qkv activation, shared by
// CausalSelfAttention and the tensor-parallel attention (which runs it on
// its own heads only).
//
// qkv: [B, T, 3C] rows laid out q | k | v, head h at columns h·D of each
// part (D = C / H). att: [B, H, T, T] probabilities; o, dout: [B, T, C].
// qkv and o are f32 or bf16 (the dtype given; precision.h's
// activation_dtype() for activations kept only for GEMMs): a bf16 qkv goes
// to the GEMMs as it is, a bf16 o is the f32 product rounded as
// gemm_compute rounds its operands, so under Precision::kBF16 the results
// are those of the f32 buffers bit for bit.
#pragma once

#include <cstdint>

#include "braid/dtype.h"

namespace braid::nn {

// o = per head softmax(q kᵀ/√D + causal mask) v; keeps the probabilities in att.
void causal_attention_forward(const void* qkv, DType qkv_dtype, int64_t B, int64_t T, int64_t C,
                              int64_t H, float* att, void* o, DType o_dtype);
// dqkv (overwritten) from dout; datt is scratch of att's size.
void causal_attention_backward(const void* qkv, DType qkv_dtype, const float* att,
                               const float* dout, int64_t B, int64_t T, int64_t C, int64_t H,
                               float* dqkv, float* datt);

}  // namespace braid::nn
