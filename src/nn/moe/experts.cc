// ExpertSet: this rank's experts, stacked, each an MLP fc → GELU → proj
// over its own block of rows, forward and backward (moe.h). The GEMMs run
// in the compute precision (precision.h); the router stays f32.
#include "braid/error.h"
#include "braid/kernels.h"
#include "braid/moe.h"
#include "braid/precision.h"

namespace braid::nn {

ExpertSet::ExpertSet(std::string name, int64_t dim, int64_t hidden, int64_t first, int64_t count)
    : dim_(dim),
      hidden_(hidden),
      first_(first),
      count_(count),
      w1_(name + ".fc.weight", {count, hidden, dim}),
      b1_(name + ".fc.bias", {count, hidden}, false),
      w2_(name + ".proj.weight", {count, dim, hidden}),
      b2_(name + ".proj.bias", {count, dim}, false),
      act_(name + ".gelu") {
  BRAID_CHECK_ARG(dim > 0 && hidden > 0 && count > 0,
                  "MoE experts " + name + ": sizes must be positive");
}

namespace {
void fill_bias(float* y, const float* b, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = b[c];
}
}  // namespace

const Tensor& ExpertSet::forward(const Tensor& x, const std::vector<int64_t>& rows, Context& ctx) {
  BRAID_CHECK_ARG(int64_t(rows.size()) == count_, "MoE experts: rows for " +
                                                      std::to_string(rows.size()) + " experts, " +
                                                      std::to_string(count_) + " held");
  int64_t m = 0;
  for (int64_t r : rows) m += r;
  BRAID_CHECK_ARG(x.numel() == m * dim_, "MoE experts: input " + shape_str(x.shape()) + " for " +
                                             std::to_string(m) + " rows of " +
                                             std::to_string(dim_));
  x_ = &x;
  rows_ = rows;
  const int64_t C = dim_, H = hidden_;
  h_.resize({m, H}, DType::kF32);
  int64_t o = 0;
  for (int64_t i = 0; i < count_; ++i) {
    const int64_t r = rows[size_t(i)];
    if (r > 0) {
      fill_bias(h_.f32() + o * H, b1_.data.f32() + i * H, r, H);
      gemm_compute(false, true, r, H, C, 1.0f, x.f32() + o * C, C, w1_.data.f32() + i * H * C, C, 1.0f,
           h_.f32() + o * H, H);
    }
    o += r;
  }
  const Tensor& a = act_.forward(h_, ctx);
  a_ = &a;
  y_.resize({m, C}, DType::kF32);
  o = 0;
  for (int64_t i = 0; i < count_; ++i) {
    const int64_t r = rows[size_t(i)];
    if (r > 0) {
      fill_bias(y_.f32() + o * C, b2_.data.f32() + i * C, r, C);
      gemm_compute(false, true, r, C, H, 1.0f, a.f32() + o * H, H, w2_.data.f32() + i * C * H, H, 1.0f,
           y_.f32() + o * C, C);
    }
    o += r;
  }
  return y_;
}

const Tensor& ExpertSet::backward(const Tensor& dy, Context& ctx) {
  BRAID_CHECK_ARG(x_ != nullptr, "MoE experts: backward before forward");
  check_same_shape(dy, y_, "MoE experts backward: dy vs y");
  const int64_t C = dim_, H = hidden_, m = y_.dim(0);
  dh_.resize({m, H}, DType::kF32);
  const Tensor& a = *a_;  // GELU's output, kept from forward
  int64_t o = 0;
  for (int64_t i = 0; i < count_; ++i) {
    const int64_t r = rows_[size_t(i)];
    if (r > 0) {
      gemm_compute(true, false, C, H, r, 1.0f, dy.f32() + o * C, C, a.f32() + o * H, H, 1.0f,
           w2_.grad.f32() + i * C * H, H);
      col_sum_acc(dy.f32() + o * C, r, C, b2_.grad.f32() + i * C);
      gemm_compute(false, false, r, H, C, 1.0f, dy.f32() + o * C, C, w2_.data.f32() + i * C * H, H, 0.0f,
           dh_.f32() + o * H, H);
    }
    o += r;
  }
  ctx.param_ready(w2_);
  ctx.param_ready(b2_);
  const Tensor& dh = act_.backward(dh_, ctx);
  dx_.resize({m, C}, DType::kF32);
  o = 0;
  for (int64_t i = 0; i < count_; ++i) {
    const int64_t r = rows_[size_t(i)];
    if (r > 0) {
      gemm_compute(true, false, H, C, r, 1.0f, dh.f32() + o * H, H, x_->f32() + o * C, C, 1.0f,
           w1_.grad.f32() + i * H * C, C);
      col_sum_acc(dh.f32() + o * H, r, H, b1_.grad.f32() + i * H);
      gemm_compute(false, false, r, C, H, 1.0f, dh.f32() + o * H, H, w1_.data.f32() + i * H * C, C, 0.0f,
           dx_.f32() + o * C, C);
    }
    o += r;
  }
  ctx.param_ready(w1_);
  ctx.param_ready(b1_);
  return dx_;
}

void ExpertSet::collect_parameters(std::vector<Parameter*>& out) {
  out.push_back(&w1_);
  out.push_back(&b1_);
  out.push_back(&w2_);
  out.push_back(&b2_);
}

void ExpertSet::release_activations() {
  act_.release_activations();
  h_.release();
  y_.release();
  dh_.release();
  dx_.release();
  x_ = nullptr;
  a_ = nullptr;
}

}  // namespace braid::nn
