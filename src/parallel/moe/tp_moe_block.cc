// TpMoeBlock: tensor-parallel attention beside a replicated MoE layer
// (tp_moe_block.h).
#include "braid/tp_moe_block.h"

namespace braid::parallel::tp {

TpMoeBlock::TpMoeBlock(std::string name, int64_t dim, int64_t heads, const nn::MoeConfig& moe,
                       std::shared_ptr<Communicator> tp, float dropout, uint64_t dropout_key,
                       bool recompute, std::shared_ptr<nn::ExpertExchange> exchange)
    : Module(name),
      ln1_(name + ".ln1", dim),
      // The serial block's dropout key, so that the masks are the same.
      attn_(name + ".attn", dim, heads, std::move(tp), SeqMode::kReplicated, dropout,
            dropout_key * 2 + 1),
      ln2_(name + ".ln2", dim),
      moe_(name + ".mlp", dim, 4 * dim, moe, std::move(exchange)),
      recompute_(recompute) {}

void TpMoeBlock::collect_shards(std::vector<Sharded>& out, int64_t experts) {
  const ShardSpec replicated{-1, 1, false};
  auto replicate = [&](nn::Module& m) {
    for (nn::Parameter* p : m.parameters()) {
      Sharded s{p, replicated, p->data.shape()};
      if (nn::MoeLayer::is_expert_param(p->name)) {
        s.expert = true;
        s.full[0] = experts;
      }
      out.push_back(s);
    }
  };
  replicate(ln1_);
  attn_.collect_shards(out);
  replicate(ln2_);
  replicate(moe_);
}

}  // namespace braid::parallel::tp
