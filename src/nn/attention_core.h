// Internal: the causal attention core on a fused qkv activation, shared by
// CausalSelfAttention and the tensor-parallel attention (which runs it on
// its own heads only).
//
// qkv: [B, T, 3C] rows laid out q | k | v, head h at columns h·D of each
// part (D = C / H). att: [B, H, T, T] probabilities; o, dout: [B, T, C].
// Every buffer is f32 or bf16 (its Tensor's dtype; the caller sizes them):
// the GEMMs read bf16 operands as they are, and a bf16 att, o, datt or
// dqkv holds the f32 result rounded as gemm_compute rounds operands.
// att in bf16 is also what softmax's backward reads (widened): the one
// place where bf16 storage changes a result, by bf16's rounding of P.
#pragma once

#include <cstdint>

#include "braid/tensor.h"

namespace braid::nn {

// o = per head softmax(q kᵀ/√D + causal mask) v; keeps the probabilities in att.
void causal_attention_forward(const Tensor& qkv, int64_t B, int64_t T, int64_t C, int64_t H,
                              Tensor& att, Tensor& o);
// dqkv (overwritten) from dout; datt is scratch of att's size (dS).
void causal_attention_backward(const Tensor& qkv, const Tensor& att, const Tensor& dout, int64_t B,
                               int64_t T, int64_t C, int64_t H, Tensor& dqkv, Tensor& datt);

}  // namespace braid::nn
