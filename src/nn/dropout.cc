// Dropout with a counter-based mask keyed on the global sample index, so
// the same sample gets the same mask however the batch is split across
// ranks and micro-batches, and recomputation reproduces it exactly.
#include "braid/error.h"
#include "braid/layers.h"
#include "nn/dropout_mask.h"

namespace braid::nn {

Dropout::Dropout(std::string name, float p, uint64_t key)
    : Module(std::move(name)), p_(p), key_(key) {
  BRAID_CHECK_ARG(p >= 0.0f && p < 1.0f, "Dropout " + name_ + ": p must be in [0, 1)");
}

namespace {
void apply(const float* in, float* out, int64_t rows, int64_t per_row, int64_t e0,
           const Context& ctx, uint64_t key, float p) {
#pragma omp parallel for if (rows * per_row >= (1 << 15)) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const SampleMask mask(ctx.seed, uint64_t(ctx.step), uint64_t(ctx.sample_offset + r), key, p);
    for (int64_t e = 0; e < per_row; ++e)
      out[r * per_row + e] = in[r * per_row + e] * mask(uint64_t(e0 + e));
  }
}
}  // namespace

const Tensor& Dropout::forward(const Tensor& x, Context& ctx) {
  active_ = ctx.training && p_ > 0.0f;
  x_ = &x;
  if (!active_) return x;
  y_.resize(x.shape(), DType::kF32);
  int64_t rows = x.ndim() ? x.dim(0) : 1;
  apply(x.f32(), y_.f32(), rows, rows ? x.numel() / rows : 0, element_offset_, ctx, key_, p_);
  return y_;
}

const Tensor& Dropout::backward(const Tensor& dy, Context& ctx) {
  if (!active_) return dy;
  check_same_shape(dy, y_, "Dropout " + name_ + " backward: dy vs y");
  dx_.resize(dy.shape(), DType::kF32);
  int64_t rows = dy.ndim() ? dy.dim(0) : 1;
  apply(dy.f32(), dx_.f32(), rows, rows ? dy.numel() / rows : 0, element_offset_, ctx, key_,
        p_);
  return dx_;
}

void Dropout::release_activations() {
  y_.release();
  dx_.release();
}

}  // namespace braid::nn
