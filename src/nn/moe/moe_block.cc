// MoeTransformerBlock: the pre-norm block with an MoE layer as its MLP.
#include "braid/moe.h"

namespace braid::nn {

MoeTransformerBlock::MoeTransformerBlock(std::string name, int64_t dim, int64_t heads,
                                         const MoeConfig& c, float dropout, uint64_t dropout_key,
                                         bool recompute, std::shared_ptr<ExpertExchange> exchange)
    : Module(name),
      ln1_(name + ".ln1", dim),
      // The dense block's dropout key for attention, so the masks match.
      attn_(name + ".attn", dim, heads, dropout, dropout_key * 2 + 1),
      ln2_(name + ".ln2", dim),
      moe_(name + ".mlp", dim, 4 * dim, c, std::move(exchange)),
      recompute_(recompute) {}

}  // namespace braid::nn
