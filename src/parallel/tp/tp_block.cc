// The pre-norm transformer block over the parallel attention and MLP (the
// residual wiring is nn::PreNormResidual, the serial block's). The
// residual stream and the layer norms are replicated (or, under sequence
// parallelism, hold this rank's positions): the norms need whole feature
// rows, which every rank has, and the parallel sublayers take and return
// the stream in that same layout.
#include "braid/error.h"
#include "braid/kernels.h"
#include "braid/tp_layers.h"

namespace braid::parallel::tp {

TpTransformerBlock::TpTransformerBlock(std::string name, int64_t dim, int64_t heads,
                                       std::shared_ptr<Communicator> tp, SeqMode mode,
                                       float dropout, uint64_t dropout_key, bool recompute)
    : Module(name),
      mode_(mode),
      ln1_(name + ".ln1", dim),
      // The serial block's dropout keys, so that the masks are the same.
      attn_(name + ".attn", dim, heads, tp, mode, dropout, dropout_key * 2 + 1),
      ln2_(name + ".ln2", dim),
      mlp_(name + ".mlp", dim, 4 * dim, tp, mode, dropout, dropout_key * 2 + 2),
      recompute_(recompute) {}

void TpTransformerBlock::collect_shards(std::vector<Sharded>& out) {
  // A norm on this rank's positions sees only their share of the gradient.
  const ShardSpec norm{-1, 1, mode_ == SeqMode::kSequenceParallel};
  auto norm_params = [&](nn::LayerNorm& ln) {
    for (nn::Parameter* p : ln.parameters()) out.push_back({p, norm, p->data.shape()});
  };
  norm_params(ln1_);
  attn_.collect_shards(out);
  norm_params(ln2_);
  mlp_.collect_shards(out);
}

}  // namespace braid::parallel::tp
