// MLP block and the pre-norm transformer block (with optional activation
// recomputation), forward and backward.
#include "braid/error.h"
#include "braid/kernels.h"
#include "braid/layers.h"

namespace braid::nn {

MlpBlock::MlpBlock(std::string name, int64_t dim, int64_t hidden, float dropout,
                   uint64_t dropout_key)
    : Module(name),
      fc_(name + ".fc", dim, hidden),
      proj_(name + ".proj", hidden, dim),
      drop_(name + ".drop", dropout, dropout_key) {
  fc_.set_activation(Linear::Activation::kGelu);
  fc_.set_bf16_output(true);        // GELU's output feeds proj_'s GEMMs alone
  proj_.set_bf16_input_grad(true);  // read by fc_'s GELU backward, which takes bf16
  fc_.set_bf16_input_grad(true);    // the block's input gradient: to its layer norm
}

const Tensor& MlpBlock::forward(const Tensor& x, Context& ctx) {
  const Tensor& a = fc_.forward(x, ctx);  // GELU(x W1ᵀ + b1)
  const Tensor& y = proj_.forward(a, ctx);
  return drop_.forward(y, ctx);
}

const Tensor& MlpBlock::backward(const Tensor& dy, Context& ctx) {
  const Tensor& d1 = drop_.backward(dy, ctx);
  const Tensor& d2 = proj_.backward(d1, ctx);
  return fc_.backward(d2, ctx);
}

void MlpBlock::collect_parameters(std::vector<Parameter*>& out) {
  fc_.collect_parameters(out);
  proj_.collect_parameters(out);
}

void MlpBlock::release_activations() {
  fc_.release_activations();
  proj_.release_activations();
  drop_.release_activations();
}

void MlpBlock::set_input_grad(bool needed) {
  input_grad_ = needed;
  fc_.set_input_grad(needed);
}

TransformerBlock::TransformerBlock(std::string name, int64_t dim, int64_t heads, float dropout,
                                   uint64_t dropout_key, bool recompute)
    : Module(name),
      ln1_(name + ".ln1", dim),
      attn_(name + ".attn", dim, heads, dropout, dropout_key * 2 + 1),
      ln2_(name + ".ln2", dim),
      mlp_(name + ".mlp", dim, 4 * dim, dropout, dropout_key * 2 + 2),
      recompute_(recompute) {
  // The norms feed attention's qkv and the MLP's fc alone.
  ln1_.set_bf16_output(true);
  ln2_.set_bf16_output(true);
  // Both output projections' results are added into the residual stream
  // at once (PreNormResidual) and not read again: one buffer for all.
  attn_.set_shared_output(true);
  mlp_.set_shared_output(true);
}

void PreNormResidual::run_forward(const Tensor& x, Context& ctx, bool need_y) {
  const Tensor& a = attn_.forward(ln1_.forward(x, ctx), ctx);
  // h = x + a and ln2(h), one pass.
  const Tensor& m = mlp_.forward(ln2_.forward_add(x, a, h_, ctx), ctx);
  if (!need_y) return;
  y_.resize(x.shape(), DType::kF32);
  vadd(h_.f32(), m.f32(), y_.f32(), y_.numel());
}

const Tensor& PreNormResidual::forward(const Tensor& x, Context& ctx, bool recompute) {
  x_ = &x;
  run_forward(x, ctx, true);
  if (recompute) release_sublayers();  // in evaluation too: no backward needs them
  return y_;
}

const Tensor& PreNormResidual::backward(const Tensor& dy, Context& ctx, bool recompute) {
  BRAID_CHECK_ARG(x_ != nullptr, "block " + block_ + ": backward before forward");
  if (recompute) run_forward(*x_, ctx, false);
  // y = h + mlp(ln2(h)):  dh = dy + ln2ᵀ(mlpᵀ(dy))
  // (each layer norm's backward adds its residual in the same pass)
  ln2_.backward_add(mlp_.backward(dy, ctx), dy, dh_, ctx);
  // h = x + attn(ln1(x)):  dx = dh + ln1ᵀ(attnᵀ(dh)), in place: attention's
  // backward is done with dh.
  ln1_.backward_add(attn_.backward(dh_, ctx), dh_, dh_, ctx);
  if (recompute) {
    // The recomputed activations and the sublayers' gradient buffers are
    // spent: only dh_ (now dx, read by the layer below) stays, so one
    // block's worth is live at a time.
    release_sublayers();
  }
  return dh_;
}

void PreNormResidual::collect_parameters(std::vector<Parameter*>& out) {
  ln1_.collect_parameters(out);
  attn_.collect_parameters(out);
  ln2_.collect_parameters(out);
  mlp_.collect_parameters(out);
}

void PreNormResidual::release_sublayers() {
  ln1_.release_activations();
  attn_.release_activations();
  ln2_.release_activations();
  mlp_.release_activations();
  h_.release();
}

void PreNormResidual::release_activations() {
  release_sublayers();
  y_.release();
}

}  // namespace braid::nn
