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

#include "braid/layers.h"
#include "braid/tensor.h"

namespace braid::nn {

// Dropout on the probabilities, fused into the core: o = (P ⊙ M) v with
// M = keep / (1 − p), drawn per (sample, head, t, j) by dropout_mask.h
// under the layer's key, as element 2^39 + (head·T + t)·T + j (past 2^39:
// never one of the layer's output dropout).
// sample_offset and head_offset give the global sample of b = 0 and head
// of h = 0, so a layout that splits samples or heads draws the same mask.
// p = 0: none.
struct AttentionDropout {
  float p = 0;
  uint64_t seed = 0, step = 0, key = 0;
  int64_t sample_offset = 0, head_offset = 0;
};

// The dropout of a layer whose output dropout is `drop`, in training only.
inline AttentionDropout attention_dropout(const Context& ctx, const Dropout& drop,
                                          int64_t head_offset) {
  if (!ctx.training || drop.p() <= 0.0f) return {};
  return {drop.p(), ctx.seed, uint64_t(ctx.step), drop.key(), ctx.sample_offset, head_offset};
}

// o = per head softmax(q kᵀ/√D + causal mask) v, with the dropout above;
// keeps the probabilities (before dropout) in att.
void causal_attention_forward(const Tensor& qkv, int64_t B, int64_t T, int64_t C, int64_t H,
                              Tensor& att, Tensor& o, const AttentionDropout& drop = {});
// dqkv (overwritten) from dout; datt is scratch of att's size (dS); drop
// as in the forward.
void causal_attention_backward(const Tensor& qkv, const Tensor& att, const Tensor& dout, int64_t B,
                               int64_t T, int64_t C, int64_t H, Tensor& dqkv, Tensor& datt,
                               const AttentionDropout& drop = {});

// The core's softmax passes alone, over n [T, T] score matrices in a row,
// one thread (the planner's element-wise probe times them,
// braid/plan_probe.h): forward in place (softmax over j ≤ t, zeros after),
// and dP → dS in place in d given the probabilities p.
void softmax_causal_matrices(float* s, int64_t n, int64_t T);
void softmax_bwd_causal_matrices(const float* p, float* d, int64_t n, int64_t T);

}  // namespace braid::nn
