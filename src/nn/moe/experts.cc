// ExpertSet: this rank's experts, stacked, each an MLP fc → GELU → proj
// over its own block of rows, forward and backward, and the shadows it
// runs for other ranks (moe.h, moe_shadow.h). The GEMMs run in the
// compute precision (precision.h); the router stays f32. fc's bias and the
// GELU are one pass each way, as the dense MLP's (bias_gelu.h).
#include <algorithm>

#include "braid/error.h"
#include "braid/kernels.h"
#include "braid/moe.h"
#include "braid/precision.h"
#include "nn/bias_gelu.h"

namespace braid::nn {

ExpertSet::ExpertSet(std::string name, int64_t dim, int64_t hidden, int64_t first, int64_t count)
    : dim_(dim),
      hidden_(hidden),
      first_(first),
      count_(count),
      w1_(name + ".fc.weight", {count, hidden, dim}),
      b1_(name + ".fc.bias", {count, hidden}, false),
      w2_(name + ".proj.weight", {count, dim, hidden}),
      b2_(name + ".proj.bias", {count, dim}, false) {
  BRAID_CHECK_ARG(dim > 0 && hidden > 0 && count > 0,
                  "MoE experts " + name + ": sizes must be positive");
}

namespace {
void fill_bias(float* y, const float* b, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = b[c];
}
}  // namespace

int64_t ExpertSet::packed_size() const { return 2 * hidden_ * dim_ + hidden_ + dim_; }

ExpertSet::View ExpertSet::view(int64_t i) {
  const int64_t C = dim_, H = hidden_;
  if (i < count_)
    return {w1_.data.f32() + i * H * C, b1_.data.f32() + i * H, w2_.data.f32() + i * C * H,
            b2_.data.f32() + i * C,     w1_.grad.f32() + i * H * C, b1_.grad.f32() + i * H,
            w2_.grad.f32() + i * C * H, b2_.grad.f32() + i * C};
  // A shadow, packed [fc.weight | fc.bias | proj.weight | proj.bias]. Its
  // gradients exist from the backward on; the forward's view has none.
  const int64_t P = packed_size(), j = i - count_;
  float* w = shadow_w_.f32() + j * P;
  if (shadow_g_.numel() == 0)
    return {w, w + H * C, w + H * C + H, w + 2 * H * C + H, nullptr, nullptr, nullptr, nullptr};
  float* g = shadow_g_.f32() + j * P;
  return {w, w + H * C, w + H * C + H, w + 2 * H * C + H,
          g, g + H * C, g + H * C + H, g + 2 * H * C + H};
}

float* ExpertSet::shadow_weights(int64_t n) {
  shadows_ = n;
  if (n == 0) return nullptr;
  shadow_w_.resize({n, packed_size()}, DType::kF32);
  return shadow_w_.f32();
}

void ExpertSet::pack_weights(int64_t i, float* out) const {
  const int64_t C = dim_, H = hidden_;
  std::copy_n(w1_.data.f32() + i * H * C, H * C, out);
  std::copy_n(b1_.data.f32() + i * H, H, out + H * C);
  std::copy_n(w2_.data.f32() + i * C * H, C * H, out + H * C + H);
  std::copy_n(b2_.data.f32() + i * C, C, out + 2 * H * C + H);
}

void ExpertSet::add_packed_grad(int64_t i, const float* g) {
  const int64_t C = dim_, H = hidden_;
  auto add = [](float* to, const float* from, int64_t n) {
    for (int64_t q = 0; q < n; ++q) to[q] += from[q];
  };
  add(w1_.grad.f32() + i * H * C, g, H * C);
  add(b1_.grad.f32() + i * H, g + H * C, H);
  add(w2_.grad.f32() + i * C * H, g + H * C + H, C * H);
  add(b2_.grad.f32() + i * C, g + 2 * H * C + H, C);
}

const Tensor& ExpertSet::forward(const Tensor& x, const std::vector<int64_t>& rows, Context&) {
  BRAID_CHECK_ARG(int64_t(rows.size()) == count_ + shadows_,
                  "MoE experts: rows for " + std::to_string(rows.size()) + " experts, " +
                      std::to_string(count_) + " held and " + std::to_string(shadows_) +
                      " shadowed");
  int64_t m = 0;
  for (int64_t r : rows) m += r;
  BRAID_CHECK_ARG(x.numel() == m * dim_, "MoE experts: input " + shape_str(x.shape()) + " for " +
                                             std::to_string(m) + " rows of " +
                                             std::to_string(dim_));
  x_ = &x;
  rows_ = rows;
  const int64_t C = dim_, H = hidden_, n = int64_t(rows.size());
  h_.resize({m, H}, DType::kF32);
  a_.resize({m, H}, DType::kF32);
  int64_t o = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = rows[size_t(i)];
    if (r > 0) {
      const View v = view(i);
      gemm_compute(false, true, r, H, C, 1.0f, x.f32() + o * C, C, v.w1, C, 0.0f,
                   h_.f32() + o * H, H);
      bias_gelu_forward(h_.f32() + o * H, v.b1, a_.f32() + o * H, r, H);
    }
    o += r;
  }
  const Tensor& a = a_;
  y_.resize({m, C}, DType::kF32);
  o = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = rows[size_t(i)];
    if (r > 0) {
      const View v = view(i);
      fill_bias(y_.f32() + o * C, v.b2, r, C);
      gemm_compute(false, true, r, C, H, 1.0f, a.f32() + o * H, H, v.w2, H, 1.0f,
                   y_.f32() + o * C, C);
    }
    o += r;
  }
  return y_;
}

const Tensor& ExpertSet::backward(const Tensor& dy, Context&) {
  BRAID_CHECK_ARG(x_ != nullptr, "MoE experts: backward before forward");
  check_same_shape(dy, y_, "MoE experts backward: dy vs y");
  const int64_t C = dim_, H = hidden_, m = y_.dim(0), n = int64_t(rows_.size());
  if (shadows_ > 0) {
    shadow_g_.resize({shadows_, packed_size()}, DType::kF32);
    shadow_g_.zero();
  }
  dh_.resize({m, H}, DType::kF32);
  const Tensor& a = a_;  // GELU's output, kept from forward
  int64_t o = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = rows_[size_t(i)];
    if (r > 0) {
      const View v = view(i);
      gemm_compute(true, false, C, H, r, 1.0f, dy.f32() + o * C, C, a.f32() + o * H, H, 1.0f,
                   v.gw2, H);
      col_sum_acc(dy.f32() + o * C, r, C, v.gb2);
      gemm_compute(false, false, r, H, C, 1.0f, dy.f32() + o * C, C, v.w2, H, 0.0f,
                   dh_.f32() + o * H, H);
    }
    o += r;
  }
  // Through GELU and fc's bias in one pass (dpre_), then fc.
  dpre_.resize({m, H}, DType::kF32);
  const Tensor& dh = dpre_;
  dx_.resize({m, C}, DType::kF32);
  o = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = rows_[size_t(i)];
    if (r > 0) {
      const View v = view(i);
      bias_gelu_backward(h_.f32() + o * H, dh_.f32() + o * H, dpre_.f32() + o * H, v.gb1, r, H);
      gemm_compute(true, false, H, C, r, 1.0f, dh.f32() + o * H, H, x_->f32() + o * C, C, 1.0f,
                   v.gw1, C);
      gemm_compute(false, false, r, C, H, 1.0f, dh.f32() + o * H, H, v.w1, C, 0.0f,
                   dx_.f32() + o * C, C);
    }
    o += r;
  }
  return dx_;
}

void ExpertSet::params_ready(Context& ctx) {
  for (Parameter* p : {&w2_, &b2_, &w1_, &b1_}) ctx.param_ready(*p);
}

void ExpertSet::collect_parameters(std::vector<Parameter*>& out) {
  out.push_back(&w1_);
  out.push_back(&b1_);
  out.push_back(&w2_);
  out.push_back(&b2_);
}

void ExpertSet::release_activations() {
  h_.release();
  a_.release();
  dpre_.release();
  y_.release();
  dh_.release();
  dx_.release();
  shadow_w_.release();
  shadow_g_.release();
  shadows_ = 0;
  x_ = nullptr;
}

}  // namespace braid::nn
