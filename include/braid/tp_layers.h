// Megatron-style tensor-parallel layers: weights split across a tensor-
// parallel (tp) group, joined by the named operators of tp_mappings.h.
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
#include "braid/layers.h"
#include "braid/loss.h"
#include "braid/tp_mappings.h"
#include "braid/tp_shard.h"

namespace braid::parallel::tp {

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

}  // namespace braid::parallel::tp
