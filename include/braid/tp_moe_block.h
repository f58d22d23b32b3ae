// parallel::tp::TpMoeBlock — the MoE transformer block (nn::MoeTransformerBlock)
// over a tensor-parallel group: attention split by heads as in
// TpTransformerBlock (tp_layers.h), the layer norms and the MoE layer
// (gate and experts) replicated over tp. Every tp rank runs the same MoE
// on the same (replicated) input; under expert parallelism each tp rank
// exchanges tokens within its own ep group (the ep groups are cut from the
// dp group at each (pp, tp) place), so its experts' gradients are the
// same on every tp rank and need no tp sum. Sequence parallelism is not
// supported with it (the MoE would see only part of each sequence; the GPT
// spec refuses it). Parameter names are the serial block's.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "braid/moe.h"
#include "braid/tp_layers.h"

namespace braid::parallel::tp {

class TpMoeBlock : public nn::Module {
 public:
  TpMoeBlock(std::string name, int64_t dim, int64_t heads, const nn::MoeConfig& moe,
             std::shared_ptr<Communicator> tp, float dropout, uint64_t dropout_key, bool recompute,
             std::shared_ptr<nn::ExpertExchange> exchange);
  const Tensor& forward(const Tensor& x, nn::Context& ctx) override {
    return res_.forward(x, ctx, recompute_);
  }
  const Tensor& backward(const Tensor& dy, nn::Context& ctx) override {
    return res_.backward(dy, ctx, recompute_);
  }
  void collect_parameters(std::vector<nn::Parameter*>& out) override {
    res_.collect_parameters(out);
  }
  // Every parameter with its split; the expert tensors marked expert with
  // their full shapes ([experts, …]).
  void collect_shards(std::vector<Sharded>& out, int64_t experts);
  void release_activations() override { res_.release_activations(); }

 private:
  nn::LayerNorm ln1_;
  ParallelAttention attn_;
  nn::LayerNorm ln2_;
  nn::MoeLayer moe_;
  bool recompute_;
  nn::PreNormResidual res_{name_, ln1_, attn_, ln2_, moe_};
};

}  // namespace braid::parallel::tp
