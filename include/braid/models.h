// Model builders: the MLP and the decoder-only GPT that `braid train` runs.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "braid/layers.h"
#include "braid/moe.h"

namespace braid::nn {

// Linear(s0→s1) ReLU Linear(s1→s2) ReLU … Linear(→s_last); layers named
// fc1, fc2, …; the first layer computes no input gradient. Initialised as
// PyTorch's nn.Linear does: weight and bias ~ U(−1/√fan_in, 1/√fan_in),
// drawn from a counter-based RNG keyed on (seed, parameter, element).
std::unique_ptr<Sequential> make_mlp(const std::vector<int64_t>& sizes, uint64_t seed);

struct GptConfig {
  int64_t vocab = 256;    // byte-level
  int64_t context = 128;  // T
  int64_t layers = 4;
  int64_t dim = 256;      // d_model
  int64_t heads = 4;
  float dropout = 0.0f;
  bool recompute = false;  // activation recomputation in every block
  // Mixture of experts (moe.h): with moe.experts > 0 the MLP of every
  // moe.every-th block (moe_block) is an MoeLayer of that many experts.
  MoeConfig moe;
};

// Embedding(tokens+positions) → blocks h.0 … h.{L-1} → ln_f → lm_head
// (Linear dim→vocab, no bias; not tied to the embedding). Weights ~
// N(0, 0.02), biases 0, LayerNorm γ=1 β=0 (GPT-2's scheme, without the
// residual-projection rescale). Input: i32 tokens [B, T]; output: logits
// [B, T, vocab]. With cfg.moe.experts > 0 the blocks moe_block() picks are
// MoeTransformerBlocks (all experts here); their gate and expert weights
// are N(0, 0.02) too. Throws check_moe's errors.
std::unique_ptr<Sequential> make_gpt(const GptConfig& cfg, uint64_t seed);

// The blocks of a GPT built by make_gpt (to toggle recomputation).
std::vector<TransformerBlock*> gpt_blocks(Sequential& gpt);

}  // namespace braid::nn
