// The pre-norm transformer block over the parallel attention and MLP. The
// residual stream and the layer norms are replicated (or, under sequence
// parallelism, hold this rank's positions): the norms need whole feature
// rows, which every rank has, and the parallel sublayers take and return
// the stream in that same layout.
#include "braid/error.h"
#include "braid/kernels.h"
#include "braid/tensor_parallel.h"

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

void TpTransformerBlock::run_forward(const Tensor& x, nn::Context& ctx, bool need_y) {
  const Tensor& a = attn_.forward(ln1_.forward(x, ctx), ctx);
  h_.resize(x.shape(), DType::kF32);
  vadd(x.f32(), a.f32(), h_.f32(), h_.numel());
  const Tensor& m = mlp_.forward(ln2_.forward(h_, ctx), ctx);
  if (!need_y) return;
  y_.resize(x.shape(), DType::kF32);
  vadd(h_.f32(), m.f32(), y_.f32(), y_.numel());
}

const Tensor& TpTransformerBlock::forward(const Tensor& x, nn::Context& ctx) {
  x_ = &x;
  run_forward(x, ctx, true);
  if (recompute_ && ctx.training) {
    ln1_.release_activations();
    attn_.release_activations();
    ln2_.release_activations();
    mlp_.release_activations();
    h_.release();
  }
  return y_;
}

const Tensor& TpTransformerBlock::backward(const Tensor& dy, nn::Context& ctx) {
  BRAID_CHECK_ARG(x_ != nullptr, "block " + name_ + ": backward before forward");
  // Recomputation repeats the forward's collectives: every rank of the
  // group recomputes the same block at the same point, so they still match.
  if (recompute_) run_forward(*x_, ctx, false);
  const Tensor& dln2 = ln2_.backward(mlp_.backward(dy, ctx), ctx);
  dh_.resize(dy.shape(), DType::kF32);
  vadd(dy.f32(), dln2.f32(), dh_.f32(), dh_.numel());
  const Tensor& dln1 = ln1_.backward(attn_.backward(dh_, ctx), ctx);
  dx_.resize(dy.shape(), DType::kF32);
  vadd(dh_.f32(), dln1.f32(), dx_.f32(), dx_.numel());
  return dx_;
}

void TpTransformerBlock::collect_parameters(std::vector<nn::Parameter*>& out) {
  ln1_.collect_parameters(out);
  attn_.collect_parameters(out);
  ln2_.collect_parameters(out);
  mlp_.collect_parameters(out);
}

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

void TpTransformerBlock::release_activations() {
  ln1_.release_activations();
  attn_.release_activations();
  ln2_.release_activations();
  mlp_.release_activations();
  h_.release();
  y_.release();
}

}  // namespace braid::parallel::tp
