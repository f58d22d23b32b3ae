// plan::ModelDesc — what the planner knows of a model: its layers in
// order, each with parameters, multiply-adds and stored activations per
// sample, and the GPT's shape for the transformer-specific terms (tensor
// parallel, sequence parallel, recomputation).
//
// Counting convention (docs/PLAN.md): a multiply-add is 2 FLOPs; the
// forward pass of a layer costs 2 × its multiply-adds, the backward 2 ×
// the forward. Model FLOPs per step = 3 × forward over the global batch,
// which is 6·N per token plus attention's 2 × 2·s·h per layer per token
// (QKᵀ and AV over the full sequence). Hardware FLOPs add what
// recomputation runs again (plan_cost.h reports both).
// For the GPT the multiply-adds per token per module equal
// parallel::gpt_spec's unit_costs (braid's pipeline cut) and the parameter
// count nn::make_gpt's; tests/plan/model_test.cc holds both.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "braid/plan_cluster.h"

namespace braid::plan {

struct GptShape {
  int64_t layers = 0, hidden = 0, heads = 0, seq = 0, vocab = 0;
  int64_t mlp_ratio = 4;  // MLP width = mlp_ratio × hidden
};

struct LayerDesc {
  std::string name;       // "emb", "h.0", ..., "ln_f", "lm_head" (GPT)
  double params = 0;
  double macs = 0;        // multiply-adds per sample, forward
  bool block = false;     // a transformer block (GPT)
  // Elements stored for backward per sample (non-GPT models; the GPT's
  // depend on tp, sequence parallelism and recomputation: plan_cost.h).
  double act_elems = 0;
};

struct ModelDesc {
  std::string kind;  // "gpt", "mlp", "dlrm"
  std::string spec;  // the text it was parsed from
  std::vector<LayerDesc> layers;
  double tokens_per_sample = 1;  // seq for the GPT, 1 otherwise
  GptShape gpt;                  // kind == "gpt"

  double params() const;
  // 2 × multiply-adds of every layer, one sample, forward.
  double forward_flops_per_sample() const;
  // Model FLOPs of one training sample: 3 × forward.
  double model_flops_per_sample() const { return 3 * forward_flops_per_sample(); }
};

// The GPT of nn::make_gpt: token and position embeddings, `layers` pre-norm
// blocks (qkv and projection with biases, two layer norms, an MLP of
// mlp_ratio × hidden with biases), a final layer norm, an unbiased head.
// Throws Error(kInvalidArgument) naming the field for a size < 1 or
// hidden not a multiple of heads.
ModelDesc describe_gpt(const GptShape& g);
// What one block of the GPT keeps for backward, in elements per token
// (multiply by the element size and the tokens of a micro-batch), as
// Megatron-LM counts it (Runtime::kMegatron). tp splits `sharded`
// and `scores`; sequence parallelism splits `replicated` too. Selective
// recomputation drops `scores`; full recomputation keeps only `input` (and
// one block's whole set while it recomputes).
struct BlockActivations {
  double replicated = 0;  // inputs of both layer norms, of qkv and of the MLP: 4·H
  double sharded = 0;     // q, k, v, the attention's context, the MLP's two R·H tensors
  double scores = 0;      // attention probabilities: heads × seq
  double input = 0;       // the block's input: H
};
BlockActivations gpt_block_activations(const GptShape& g);

// What braid's CPU layers hold through a step (Runtime::kBraidCpu), in
// elements per token on one rank: each layer keeps its
// output and its gradient buffers between steps. `spec_built`: the model
// was built from its ModelSpec (any tp or pp), whose blocks are the tp
// layers (braid/tp_layers.h) even on a tp group of one.
struct BraidActivations {
  double block = 0;      // one block, nothing recomputed
  double selective = 0;  // one block without its scores (braid does not run it; counted alike)
  double input = 0;      // one block under full recomputation: its output and dL/dinput
  double first = 0;      // the embedding
  double last = 0;       // ln_f, the head and the loss
};
// Transformer blocks on each of `stages` pipeline stages (virtual stages
// in order). kMegatron: as even as can be, the extras from stage 1 on
// (stage 0 carries the embedding, the last the head). kBraidCpu: where
// `braid train --pp` cuts the GPT's units (embedding, blocks, ln_f, head):
// parallel::partition_layers over its ModelSpec's unit costs, so a stage
// may hold none (a large head alone). Needs stages <= layers.
std::vector<int64_t> gpt_stage_blocks(const GptShape& g, int stages, Runtime runtime);

BraidActivations gpt_braid_activations(const GptShape& g, int tp, bool sequence_parallel,
                                       bool spec_built);

// nn::make_mlp(sizes): Linear layers with biases between consecutive sizes.
ModelDesc describe_mlp(const std::vector<int64_t>& sizes);

// nn::Dlrm's shape: `tables` embedding tables of `rows` rows each and
// width `dim` (bag ids per sample each), a bottom MLP from `dense` features
// through `bottom` to dim, dot interaction, a top MLP through `top` to 1.
struct DlrmShape {
  int64_t dense = 13, tables = 26, rows = 1000000, dim = 64, bag = 1;
  std::vector<int64_t> bottom = {512, 256}, top = {512, 256};
};
ModelDesc describe_dlrm(const DlrmShape& d);

// "gpt:layers=L,hidden=H,heads=A,seq=S,vocab=V[,mlp=R]",
// "mlp:784,256,10", "dlrm:tables=26,rows=1000000,dim=64,dense=13,
// bottom=512/256,top=512/256,bag=1", or a preset: "gpt-175b" (GPT-3:
// 96 layers × 12288, 96 heads), "gpt-18b" (40 × 6144, 48 heads), "gpt-530b"
// (105 × 20480, 128 heads), "gpt-1t" (128 × 25600, 160 heads), all with seq
// 2048 and vocab 51200. Every value is a whole number >= 1: layers and
// tables at most 100000, rows at most 2^40, the others at most 2^31.
// Throws Error(kInvalidArgument) naming the key.
ModelDesc parse_model(const std::string& spec);
// parse_model of `spec`, or, when `spec` names a readable file, of the
// file's text (surrounding white space and lines starting '#' ignored).
ModelDesc load_model(const std::string& spec_or_path);

}  // namespace braid::plan
