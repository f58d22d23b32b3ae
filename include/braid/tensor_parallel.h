// Megatron-style tensor parallelism: layers whose weights are split across
// a tensor-parallel (tp) group, and the named communication operators that
// join them.
//
// Every piece takes its tp communicator explicitly (a Mesh's tp(), or any
// communicator) and is an nn::Module with an explicit forward and backward,
// so the pieces compose as the serial layers do. All ranks of the group
// must call the same pieces in the same order (each one is collective).
//
// Layouts. Activations are [B, T, C] (B samples, T positions, C features);
// "last dim" is C, "sequence" is T. Rank r of a group of n holds:
//   * column-parallel weight [out, in]: rows [r·out/n, (r+1)·out/n) of each
//     of its `parts` blocks (a fused q|k|v weight has 3 parts, so each rank
//     holds q, k and v of its own heads);
//   * row-parallel weight [out, in]: columns [r·in/n, (r+1)·in/n); its bias
//     is whole on every rank and added once, after the reduction;
//   * vocab-parallel embedding and lm_head: rows (tokens) [r·V/n, (r+1)·V/n);
//   * a sequence-parallel activation: positions [r·T/n, (r+1)·T/n).
// Parameters keep the serial model's names, so optimizer state (kept per
// name) and checkpoints line up with the serial model's.
//
// Sizes that do not divide by the group's size (heads, hidden, vocab,
// positions under sequence parallelism) raise Error(kInvalidArgument)
// naming the size and the group size.
//
// Costs per forward (backward mirrors it), n ranks, N = bytes of one full
// [B, T, C] activation: parallel MLP and parallel attention each one
// all_reduce of N (or, with sequence parallelism, one all_gather and one
// reduce_scatter of N, the same bytes in two halves); the vocab-parallel
// cross-entropy two small all_reduces of B·T floats (row max, then the
// summed exponentials with the target logit) and never the full logits.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "braid/comm.h"
#include "braid/data.h"
#include "braid/layers.h"
#include "braid/models.h"
#include "braid/optim.h"
#include "braid/trainer.h"

namespace braid::parallel::tp {

// size / parts, or Error(kInvalidArgument) "<what> <size> is not divisible
// by the tensor-parallel size <parts>".
int64_t divide(int64_t size, int64_t parts, const std::string& what);

// ---- communication operators (Megatron's mappings) -------------------------
// Each is a Module: forward and backward are the two halves of one named
// operator. Outputs are buffers the operator owns (or its input, for an
// identity half).

// What every operator holds: its group, its outputs and a staging buffer.
class TpOperator : public nn::Module {
 public:
  TpOperator(std::string name, std::shared_ptr<Communicator> tp)
      : Module(std::move(name)), tp_(std::move(tp)) {}

 protected:
  std::shared_ptr<Communicator> tp_;
  Tensor y_, dx_, scratch_;
};

// Identity forward; backward all-reduces (sums) dL/dx over the group. Sits
// where a replicated activation enters column-parallel weights.
class CopyToTpRegion : public TpOperator {
 public:
  using TpOperator::TpOperator;
  const Tensor& forward(const Tensor& x, nn::Context& ctx) override;
  const Tensor& backward(const Tensor& dy, nn::Context& ctx) override;
};

// Forward all-reduces (sums) partial results; identity backward. Sits after
// row-parallel weights.
class ReduceFromTpRegion : public TpOperator {
 public:
  using TpOperator::TpOperator;
  const Tensor& forward(const Tensor& x, nn::Context& ctx) override;
  const Tensor& backward(const Tensor& dy, nn::Context& ctx) override;
};

// Forward keeps this rank's block of the last dim; backward all-gathers
// the blocks of dL/dx along the last dim.
class ScatterToTpRegion : public TpOperator {
 public:
  using TpOperator::TpOperator;
  const Tensor& forward(const Tensor& x, nn::Context& ctx) override;
  const Tensor& backward(const Tensor& dy, nn::Context& ctx) override;
};

// Forward all-gathers the blocks of the last dim; backward keeps this
// rank's block of dL/dy.
class GatherFromTpRegion : public TpOperator {
 public:
  using TpOperator::TpOperator;
  const Tensor& forward(const Tensor& x, nn::Context& ctx) override;
  const Tensor& backward(const Tensor& dy, nn::Context& ctx) override;
};

// Sequence parallelism (input [B, T, ...], split along T):
// forward keeps this rank's positions; backward all-gathers dL/dx along T.
class ScatterToSequenceRegion : public TpOperator {
 public:
  using TpOperator::TpOperator;
  const Tensor& forward(const Tensor& x, nn::Context& ctx) override;
  const Tensor& backward(const Tensor& dy, nn::Context& ctx) override;
};

// Forward all-gathers along T; backward reduce-scatters (sums) dL/dy along
// T. Replaces CopyToTpRegion in front of column-parallel weights.
class GatherFromSequenceRegion : public TpOperator {
 public:
  using TpOperator::TpOperator;
  const Tensor& forward(const Tensor& x, nn::Context& ctx) override;
  const Tensor& backward(const Tensor& dy, nn::Context& ctx) override;
};

// Forward reduce-scatters (sums) along T; backward all-gathers dL/dy along
// T. Replaces ReduceFromTpRegion after row-parallel weights.
class ReduceScatterToSequenceRegion : public TpOperator {
 public:
  using TpOperator::TpOperator;
  const Tensor& forward(const Tensor& x, nn::Context& ctx) override;
  const Tensor& backward(const Tensor& dy, nn::Context& ctx) override;
};

// ---- how a parameter is split -----------------------------------------------

struct ShardSpec {
  int dim = -1;   // dimension of the full tensor split across the group; -1: replicated
  int parts = 1;  // that dimension is `parts` equal blocks, each split (fused q|k|v: 3)
  // Replicated, but each rank's gradient covers only its own positions
  // (sequence parallelism): the gradients must be summed over the group.
  bool partial_grad = false;
};

struct Sharded {
  nn::Parameter* param = nullptr;
  ShardSpec spec;
  Shape full;  // the serial parameter's shape
};

// This rank's shard of a full tensor.
Tensor slice_shard(const Tensor& full, const ShardSpec& spec, int rank, int size);
// The full tensor from every rank's shard (collective: one all_gather).
Tensor gather_shards(const Tensor& shard, const ShardSpec& spec, const Shape& full,
                     Communicator& tp);

// ---- layers -----------------------------------------------------------------

// How activations enter and leave the parallel region.
enum class SeqMode { kReplicated, kSequenceParallel };

// y = x Wᵀ + b with W's output features split: this rank computes its
// block of y. Input: replicated [.., in] through CopyToTpRegion, or (under
// sequence parallelism) this rank's positions through
// GatherFromSequenceRegion. Output: this rank's block [.., out/n] or, with
// gather_output, all of it (GatherFromTpRegion).
class ColumnParallelLinear : public nn::Module {
 public:
  struct Options {
    bool bias = true;
    int parts = 1;             // blocks of the output features (q|k|v: 3)
    bool gather_output = false;
    SeqMode input = SeqMode::kReplicated;
  };
  ColumnParallelLinear(std::string name, int64_t in, int64_t out,
                       std::shared_ptr<Communicator> tp, Options opts);
  const Tensor& forward(const Tensor& x, nn::Context& ctx) override;
  const Tensor& backward(const Tensor& dy, nn::Context& ctx) override;
  void collect_parameters(std::vector<nn::Parameter*>& out) override;
  void collect_shards(std::vector<Sharded>& out);
  void release_activations() override;
  void set_input_grad(bool needed) override;
  nn::Linear& local() { return local_; }

 private:
  std::unique_ptr<nn::Module> enter_;  // CopyToTp or GatherFromSequence
  nn::Linear local_;
  std::unique_ptr<GatherFromTpRegion> gather_;
  int64_t in_, out_;
  int parts_;
};

// y = x Wᵀ + b with W's input features split: x is this rank's block of the
// features [.., in/n]; the partial products are summed over the group
// (ReduceFromTpRegion, or under sequence parallelism
// ReduceScatterToSequenceRegion, leaving this rank's positions), then the
// bias is added once.
class RowParallelLinear : public nn::Module {
 public:
  struct Options {
    bool bias = true;
    SeqMode output = SeqMode::kReplicated;
  };
  RowParallelLinear(std::string name, int64_t in, int64_t out, std::shared_ptr<Communicator> tp,
                    Options opts);
  const Tensor& forward(const Tensor& x, nn::Context& ctx) override;
  const Tensor& backward(const Tensor& dy, nn::Context& ctx) override;
  void collect_parameters(std::vector<nn::Parameter*>& out) override;
  void collect_shards(std::vector<Sharded>& out);
  void release_activations() override;
  void set_input_grad(bool needed) override { local_.set_input_grad(needed); }
  nn::Linear& local() { return local_; }

 private:
  nn::Linear local_;
  std::unique_ptr<nn::Module> leave_;  // ReduceFromTp or ReduceScatterToSequence
  int64_t in_, out_;
  bool has_bias_;
  SeqMode mode_;
  nn::Parameter b_;
  Tensor y_;
};

// The serial MlpBlock split: fc column-parallel (hidden/n features here),
// GELU, proj row-parallel, dropout (same mask as the serial block: under
// sequence parallelism it is keyed by each element's place in the whole
// sample). One all_reduce forward and one backward (kReplicated), or one
// all_gather + one reduce_scatter each way (kSequenceParallel).
class ParallelMlp : public nn::Module {
 public:
  ParallelMlp(std::string name, int64_t dim, int64_t hidden, std::shared_ptr<Communicator> tp,
              SeqMode mode = SeqMode::kReplicated, float dropout = 0, uint64_t dropout_key = 0);
  const Tensor& forward(const Tensor& x, nn::Context& ctx) override;
  const Tensor& backward(const Tensor& dy, nn::Context& ctx) override;
  void collect_parameters(std::vector<nn::Parameter*>& out) override;
  void collect_shards(std::vector<Sharded>& out);
  void release_activations() override;
  void set_input_grad(bool needed) override;

 private:
  std::shared_ptr<Communicator> tp_;
  SeqMode mode_;
  ColumnParallelLinear fc_;
  nn::GELU act_;
  RowParallelLinear proj_;
  nn::Dropout drop_;
};

// The serial CausalSelfAttention with its heads split: qkv column-parallel
// (q, k and v of heads [r·H/n, (r+1)·H/n)), attention on those heads,
// output projection row-parallel, dropout as in ParallelMlp. Same
// communication as ParallelMlp.
class ParallelAttention : public nn::Module {
 public:
  ParallelAttention(std::string name, int64_t dim, int64_t heads,
                    std::shared_ptr<Communicator> tp, SeqMode mode = SeqMode::kReplicated,
                    float dropout = 0, uint64_t dropout_key = 0);
  const Tensor& forward(const Tensor& x, nn::Context& ctx) override;
  const Tensor& backward(const Tensor& dy, nn::Context& ctx) override;
  void collect_parameters(std::vector<nn::Parameter*>& out) override;
  void collect_shards(std::vector<Sharded>& out);
  void release_activations() override;
  void set_input_grad(bool needed) override;

 private:
  std::shared_ptr<Communicator> tp_;
  SeqMode mode_;
  int64_t dim_, heads_, local_dim_, local_heads_;
  ColumnParallelLinear qkv_;
  RowParallelLinear proj_;
  nn::Dropout drop_;
  const Tensor* qkv_out_ = nullptr;
  Tensor att_, o_, dqkv_, datt_;
};

// Token + position embedding with the token table split by vocabulary:
// each rank looks up the tokens in its range (zeros elsewhere), the
// partial rows are summed over the group (all_reduce, or reduce_scatter
// along T under sequence parallelism), then the position rows are added.
// The position table is whole on every rank. No input gradient.
class VocabParallelEmbedding : public nn::Module {
 public:
  VocabParallelEmbedding(std::string name, int64_t vocab, int64_t dim, int64_t context,
                         std::shared_ptr<Communicator> tp, SeqMode mode = SeqMode::kReplicated);
  const Tensor& forward(const Tensor& tokens, nn::Context& ctx) override;
  const Tensor& backward(const Tensor& dy, nn::Context& ctx) override;
  void collect_parameters(std::vector<nn::Parameter*>& out) override;
  void collect_shards(std::vector<Sharded>& out);
  void release_activations() override;
  int64_t vocab_begin() const { return v0_; }

 private:
  std::shared_ptr<Communicator> tp_;
  SeqMode mode_;
  int64_t vocab_, dim_, context_, local_vocab_, v0_;
  nn::Parameter wte_, wpe_;
  std::unique_ptr<nn::Module> reduce_;  // ReduceFromTp or ReduceScatterToSequence
  const Tensor* tokens_ = nullptr;
  Tensor partial_, y_, empty_;
};

// Softmax cross-entropy over logits whose vocabulary is split across the
// group ([.., V/n] here, this rank's tokens [r·V/n, (r+1)·V/n)). The row
// max and then Σexp with the target's logit are all-reduced; the full
// logits are never gathered. Same contract as nn::SoftmaxCrossEntropy:
// forward returns the SUM over rows of −log p[target] (equal on every
// rank), backward(scale) returns this rank's block of scale·(p − onehot).
class VocabParallelCrossEntropy : public nn::RowLoss {
 public:
  explicit VocabParallelCrossEntropy(std::shared_ptr<Communicator> tp);
  double forward(const Tensor& logits, const Tensor& targets) override;
  const Tensor& backward(float scale) override;
  // correct(): rows whose argmax over the whole vocabulary (the first
  // maximum, as the serial loss takes it) is the target.

 private:
  std::shared_ptr<Communicator> tp_;
  Tensor row_stats_;
  int64_t v0_ = 0;
};

// Pre-norm block of ParallelAttention and ParallelMlp with replicated layer
// norms; under sequence parallelism the residual stream, the norms and the
// dropouts work on this rank's positions only. Recomputation as in
// nn::TransformerBlock (the forward's collectives run again in backward).
class TpTransformerBlock : public nn::Module {
 public:
  TpTransformerBlock(std::string name, int64_t dim, int64_t heads,
                     std::shared_ptr<Communicator> tp, SeqMode mode, float dropout,
                     uint64_t dropout_key, bool recompute);
  // Recomputation repeats the forward's collectives: every rank of the
  // group recomputes the same block at the same point, so they still match.
  const Tensor& forward(const Tensor& x, nn::Context& ctx) override {
    return res_.forward(x, ctx, recompute_);
  }
  const Tensor& backward(const Tensor& dy, nn::Context& ctx) override {
    return res_.backward(dy, ctx, recompute_);
  }
  void collect_parameters(std::vector<nn::Parameter*>& out) override {
    res_.collect_parameters(out);
  }
  void collect_shards(std::vector<Sharded>& out);
  void release_activations() override { res_.release_activations(); }

 private:
  SeqMode mode_;
  nn::LayerNorm ln1_;
  ParallelAttention attn_;
  nn::LayerNorm ln2_;
  ParallelMlp mlp_;
  bool recompute_;
  nn::PreNormResidual res_{name_, ln1_, attn_, ln2_, mlp_};
};

// A range [begin, end) of the GPT's top-level modules, numbered as
// nn::make_gpt's children: 0 emb, 1 … L the blocks h.0 … h.{L−1}, L + 1
// ln_f, L + 2 lm_head (gpt_module_count(cfg) = L + 3 in all).
struct ModuleRange {
  size_t begin = 0, end = 0;
};
size_t gpt_module_count(const nn::GptConfig& cfg);
// The relative cost of each of those modules (gpt_module_count entries):
// multiply-adds per token of its forward, which its backward repeats about
// twice over, so the ratios hold for forward + backward. A block:
// 12·d² (QKV, output projection, a 4·d MLP) + 2·T·d (scores and their
// weighted sum); lm_head d·V; the embedding and ln_f a few per feature.
// What a pipeline cuts its stages by when nothing was measured: by count,
// the embedding and ln_f would weigh as much as a block.
std::vector<double> gpt_module_costs(const nn::GptConfig& cfg);

struct TpGptOptions {
  bool sequence_parallel = false;
  // The top-level modules this rank builds (a pipeline stage's, or an
  // interleaved schedule's chunks); empty: all of them. Modules outside
  // the ranges are never allocated.
  std::vector<ModuleRange> modules;
  // false: skip the serial model's values and leave each parameter as its
  // layer's constructor made it, so building costs only the modules' own
  // buffers. For a copy whose parameters are then pointed at another
  // TpGpt's (a pipeline's activation slots) or whose values do not matter
  // (timing a layer).
  bool initialise = true;
};

// nn::make_gpt's model split across a tp group. Input: i32 tokens [B, T];
// output: this rank's block of the logits [B, T, V/n] (for
// VocabParallelCrossEntropy). Parameters are the serial model's for the
// same seed, sliced: the constructor builds the serial GPT once, keeps
// this rank's shards of the modules it builds and frees it (memory: one
// full model, briefly; none with TpGptOptions::initialise false). Throws Error(kInvalidArgument) naming heads, vocab
// or dim when one does not divide by the group's size, or a module range
// outside the model; with sequence parallelism forward throws when T does
// not divide.
class TpGpt : public nn::Module {
 public:
  TpGpt(const nn::GptConfig& cfg, uint64_t seed, std::shared_ptr<Communicator> tp,
        TpGptOptions opts = {});
  ~TpGpt() override;
  // The whole model: Error(kInvalidArgument) when this TpGpt holds only
  // some modules (run those through a pipeline: module()).
  const Tensor& forward(const Tensor& tokens, nn::Context& ctx) override;
  const Tensor& backward(const Tensor& dlogits, nn::Context& ctx) override;
  void collect_parameters(std::vector<nn::Parameter*>& out) override;
  void release_activations() override;
  // Top-level module i (see ModuleRange), or Error(kInvalidArgument) when
  // it was not built here.
  nn::Module& module(size_t i) const;
  bool has_module(size_t i) const { return i < units_.size() && units_[i] != nullptr; }
  size_t module_count() const { return units_.size(); }
  // Every parameter this rank holds with its split, in parameters() order.
  const std::vector<Sharded>& shards() const { return shards_; }
  const std::shared_ptr<Communicator>& tp() const { return tp_; }
  // How many times this process has built the serial GPT to initialise a
  // TpGpt (one per TpGpt constructed with initialise true).
  static int64_t serial_builds();

 private:
  std::shared_ptr<Communicator> tp_;
  TpGptOptions opts_;
  std::vector<std::unique_ptr<nn::Module>> units_;  // [module index]; null: not built here
  std::vector<Sharded> shards_;
};

// Under sequence parallelism, sums over the group the gradients of the
// parameters marked partial_grad: replicated parameters that each rank
// computed from its own positions (layer norms, row-parallel biases, the
// position table). One all_reduce through `scratch`; nothing when there are
// none. Call once per optimizer step, after the last backward (gradients
// accumulate over micro-batches first).
void reduce_partial_grads(const std::vector<Sharded>& params, Communicator& tp, Tensor& scratch);

}  // namespace braid::parallel::tp
