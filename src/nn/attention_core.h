// Internal: the causal attention core on a fused qkv activation, shared by
// CausalSelfAttention and the tensor-parallel attention (which runs it on
// its own heads only).
//
// qkv: [B, T, 3C] rows laid out q | k | v, head h at columns h·D of each
// part (D = C / H). att: [B, H, T, T] probabilities; o, dout: [B, T, C].
#pragma once

#include <cstdint>

namespace braid::nn {

// o = per head softmax(q kᵀ/√D + causal mask) v; keeps the probabilities in att.
void causal_attention_forward(const float* qkv, int64_t B, int64_t T, int64_t C, int64_t H,
                              float* att, float* o);
// dqkv (overwritten) from dout; datt is scratch of att's size.
void causal_attention_backward(const float* qkv, const float* att, const float* dout, int64_t B,
                               int64_t T, int64_t C, int64_t H, float* dqkv, float* datt);

}  // namespace braid::nn
