// The GPT of nn::make_gpt as a ModelSpec: its top-level modules are the
// units, each built over a tensor-parallel group from the tp layers
// (tp_layers.h) under the serial model's parameter names.
#include "braid/error.h"
#include "braid/model_spec.h"
#include "braid/tp_layers.h"
#include "braid/tp_moe_block.h"

namespace braid::parallel {

namespace {

class GptSpec : public ModelSpec {
 public:
  GptSpec(const nn::GptConfig& cfg, uint64_t seed) : c_(cfg), seed_(seed) {
    BRAID_CHECK_ARG(c_.vocab > 0 && c_.context > 0 && c_.layers > 0 && c_.dim > 0 && c_.heads > 0,
                    "GPT sizes must be positive");
    BRAID_CHECK_ARG(c_.dim % c_.heads == 0, "GPT: d_model " + std::to_string(c_.dim) +
                                                " not divisible by heads " +
                                                std::to_string(c_.heads));
    if (c_.moe.experts > 0) nn::check_moe(c_.moe);
  }

  int64_t experts() const override { return c_.moe.experts; }

  std::string name() const override { return "gpt"; }
  uint64_t seed() const override { return seed_; }
  size_t unit_count() const override { return size_t(c_.layers) + 3; }
  std::string describe_units() const override {
    return "the embedding, " + std::to_string(c_.layers) +
           " blocks (--layers), the final norm and the head";
  }

  // Multiply-adds per token of each unit's forward, which its backward
  // repeats about twice over, so the ratios hold for forward + backward. A
  // block: 12·d² (QKV, output projection, a 4·d MLP) + 2·T·d (scores and
  // their weighted sum); lm_head d·V; the embedding and ln_f a few per
  // feature. By count, the embedding and ln_f would weigh as much as a
  // block.
  std::vector<double> unit_costs() const override {
    const double d = double(c_.dim), T = double(c_.context), V = double(c_.vocab);
    std::vector<double> cost(unit_count(), 12 * d * d + 2 * T * d);
    // An MoE block: attention, the gate, and top_k experts' MLPs per token.
    for (int64_t l = 0; l < c_.layers; ++l)
      if (nn::moe_block(c_.moe, l))
        cost[size_t(l) + 1] = 4 * d * d + 2 * T * d + d * double(c_.moe.experts) +
                              8 * d * d * double(c_.moe.top_k);
    cost.front() = 2 * d;           // token row + position row
    cost[cost.size() - 2] = 5 * d;  // a layer norm
    cost.back() = d * V;
    return cost;
  }

  void check_split(int n, bool sequence_parallel) const override {
    BRAID_CHECK_ARG(c_.moe.experts == 0 || !sequence_parallel || n == 1,
                    "GPT with MoE (--moe-experts " + std::to_string(c_.moe.experts) +
                        "): sequence parallelism is not supported (the MoE blocks route "
                        "whole sequences)");
    tp::divide(c_.heads, n, "GPT heads");
    tp::divide(c_.vocab, n, "GPT vocabulary");
    tp::divide(4 * c_.dim, n, "GPT MLP hidden size");
  }

  std::unique_ptr<nn::Module> build_unit(size_t i, const std::shared_ptr<Communicator>& tp,
                                         bool sequence_parallel,
                                         std::vector<tp::Sharded>& shards) const override {
    return build_unit_ep(i, tp, nullptr, sequence_parallel, shards);
  }

  std::unique_ptr<nn::Module> build_unit_ep(size_t i, const std::shared_ptr<Communicator>& tp,
                                            const std::shared_ptr<nn::ExpertExchange>& ep,
                                            bool sequence_parallel,
                                            std::vector<tp::Sharded>& shards) const override {
    const size_t L = size_t(c_.layers);
    if (i >= 1 && i <= L && nn::moe_block(c_.moe, int64_t(i) - 1)) {
      // Attention over tp, the MoE replicated over tp; the expert tensors
      // are this ep rank's block of the serial model's.
      auto b = std::make_unique<tp::TpMoeBlock>("h." + std::to_string(i - 1), c_.dim, c_.heads,
                                                c_.moe, tp, c_.dropout, uint64_t(i - 1),
                                                c_.recompute, ep);
      b->collect_shards(shards, c_.moe.experts);
      return b;
    }
    const tp::SeqMode mode =
        sequence_parallel ? tp::SeqMode::kSequenceParallel : tp::SeqMode::kReplicated;
    if (i == 0) {
      auto emb = std::make_unique<tp::VocabParallelEmbedding>("emb", c_.vocab, c_.dim, c_.context,
                                                              tp, mode);
      emb->collect_shards(shards);
      return emb;
    }
    if (i <= L) {
      auto b = std::make_unique<tp::TpTransformerBlock>("h." + std::to_string(i - 1), c_.dim,
                                                        c_.heads, tp, mode, c_.dropout,
                                                        uint64_t(i - 1), c_.recompute);
      b->collect_shards(shards);
      return b;
    }
    if (i == L + 1) {
      auto ln = std::make_unique<nn::LayerNorm>("ln_f", c_.dim);
      for (nn::Parameter* p : ln->parameters())
        shards.push_back({p, tp::ShardSpec{-1, 1, sequence_parallel}, p->data.shape()});
      return ln;
    }
    auto head = std::make_unique<tp::ColumnParallelLinear>(
        "lm_head", c_.dim, c_.vocab, tp, tp::ColumnParallelLinear::Options{false, 1, false, mode});
    head->collect_shards(shards);
    return head;
  }

  std::unique_ptr<nn::Sequential> build_serial() const override { return nn::make_gpt(c_, seed_); }

  std::unique_ptr<nn::Loss> make_loss(const std::shared_ptr<Communicator>& tp) const override {
    return std::make_unique<tp::VocabParallelCrossEntropy>(tp);
  }

  Tensor sample_input(int64_t rows) const override {
    return Tensor({rows, c_.context}, DType::kI32);  // token 0 everywhere
  }
  Tensor sample_target(int64_t rows) const override {
    return Tensor({rows, c_.context}, DType::kI32);
  }

  void check_input(const Tensor& x, int n, bool sequence_parallel) const override {
    if (sequence_parallel && x.ndim() == 2)
      tp::divide(x.dim(1), n, "GPT (sequence parallel): sequence length");
  }

 private:
  nn::GptConfig c_;
  uint64_t seed_;
};

}  // namespace

std::unique_ptr<ModelSpec> gpt_spec(const nn::GptConfig& cfg, uint64_t seed) {
  return std::make_unique<GptSpec>(cfg, seed);
}

}  // namespace braid::parallel
