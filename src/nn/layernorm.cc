// LayerNorm over the last dimension, forward and backward (llm.c's form:
// dx = rstd · (dŷ − mean(dŷ) − x̂ · mean(dŷ · x̂)), dŷ = dy · γ).
#include "../tensor/simd.h"  // first: sets vectorisation options
#include <cmath>

#include "braid/error.h"
#include "braid/layers.h"
#include "braid/precision.h"
#include "nn/wide_scratch.h"

namespace braid::nn {

LayerNorm::LayerNorm(std::string name, int64_t dim, float eps)
    : Module(std::move(name)),
      dim_(dim),
      eps_(eps),
      g_(name_ + ".weight", {dim}, false),
      b_(name_ + ".bias", {dim}, false) {
  BRAID_CHECK_ARG(dim > 0, "LayerNorm " + name_ + ": dim must be positive");
  g_.data.fill(1.0f);
}

namespace {
BRAID_SIMD_FN void ln_fwd_rows(const float* x, const float* g, const float* b, float* y,
                               float* mean, float* rstd, int64_t r0, int64_t r1, int64_t d,
                               float eps) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * d;
    float* yr = y + r * d;
    float s = 0;
    for (int64_t i = 0; i < d; ++i) s += xr[i];
    float m = s / float(d);
    float v = 0;
    for (int64_t i = 0; i < d; ++i) {
      float c = xr[i] - m;
      v += c * c;
    }
    float rs = 1.0f / std::sqrt(v / float(d) + eps);
    for (int64_t i = 0; i < d; ++i) yr[i] = (xr[i] - m) * rs * g[i] + b[i];
    mean[r] = m;
    rstd[r] = rs;
  }
}

void ln_fwd(const float* x, const float* g, const float* b, float* y, float* mean, float* rstd,
            int64_t rows, int64_t d, float eps) {
  simd::parallel_ranges(rows, d >= (1 << 16) ? 1 : (1 << 16) / d, [&](int64_t r0, int64_t r1) {
    ln_fwd_rows(x, g, b, y, mean, rstd, r0, r1, d, eps);
  });
}

BRAID_SIMD_FN void ln_bwd(const float* x, const float* g, const float* mean, const float* rstd,
                          const float* dy, float* dx, float* dg, float* db, int64_t rows,
                          int64_t d) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    const float* dyr = dy + r * d;
    float m = mean[r], rs = rstd[r];
    float a = 0, c = 0;  // Σ dŷ, Σ dŷ·x̂
    for (int64_t i = 0; i < d; ++i) {
      float xh = (xr[i] - m) * rs;
      float dn = dyr[i] * g[i];
      a += dn;
      c += dn * xh;
      dg[i] += dyr[i] * xh;
      db[i] += dyr[i];
    }
    a /= float(d);
    c /= float(d);
    if (dx) {
      float* dxr = dx + r * d;
      for (int64_t i = 0; i < d; ++i) {
        float xh = (xr[i] - m) * rs;
        dxr[i] = rs * (dyr[i] * g[i] - a - xh * c);
      }
    }
  }
}
}  // namespace

const Tensor& LayerNorm::forward(const Tensor& x, Context&) {
  const int64_t rows = rows_of_width(x, dim_, "LayerNorm", name_);
  const bool narrow = bf16_output_ && activation_dtype() == DType::kBF16;
  mean_.resize({rows}, DType::kF32);
  rstd_.resize({rows}, DType::kF32);
  if (narrow) {  // row by row: blocks of rows through the scratch
    y_.resize(x.shape(), DType::kBF16);
    in_row_blocks(rows, dim_, [&](int64_t r0, int64_t n) {
      float* y = wide_scratch({n, dim_});
      ln_fwd(x.f32() + r0 * dim_, g_.data.f32(), b_.data.f32(), y, mean_.f32() + r0,
             rstd_.f32() + r0, n, dim_, eps_);
      round_rows_to_bf16(y, n, dim_, dim_, y_.bf16() + r0 * dim_, dim_);
    });
  } else {
    y_.resize(x.shape(), DType::kF32);
    ln_fwd(x.f32(), g_.data.f32(), b_.data.f32(), y_.f32(), mean_.f32(), rstd_.f32(), rows, dim_,
           eps_);
  }
  x_ = &x;
  return y_;
}

const Tensor& LayerNorm::backward(const Tensor& dy, Context& ctx) {
  BRAID_CHECK_ARG(x_ != nullptr, "LayerNorm " + name_ + ": backward before forward");
  check_same_shape(dy, *x_, "LayerNorm " + name_ + " backward: dy vs x");

  int64_t rows = dy.numel() / dim_;
  float* dx = nullptr;
  if (input_grad_) {
    dx_.resize(dy.shape(), DType::kF32);
    dx = dx_.f32();
  } else {
    dx_.resize({0});
  }
  if (dy.dtype() == DType::kBF16) {
    // A bf16 dy (a bf16-kept input gradient of the layer above): widened a
    // block of rows at a time, the rows in the same order.
    in_row_blocks(rows, dim_, [&](int64_t r0, int64_t n) {
      float* w = wide_scratch({n, dim_});
      convert_bf16_to_f32(dy.bf16() + r0 * dim_, w, size_t(n * dim_));
      ln_bwd(x_->f32() + r0 * dim_, g_.data.f32(), mean_.f32() + r0, rstd_.f32() + r0, w,
             dx ? dx + r0 * dim_ : nullptr, g_.grad.f32(), b_.grad.f32(), n, dim_);
    });
  } else {
    ln_bwd(x_->f32(), g_.data.f32(), mean_.f32(), rstd_.f32(), dy.f32(), dx, g_.grad.f32(),
           b_.grad.f32(), rows, dim_);
  }
  ctx.param_ready(g_);
  ctx.param_ready(b_);
  return dx_;
}

void LayerNorm::collect_parameters(std::vector<Parameter*>& out) {
  out.push_back(&g_);
  out.push_back(&b_);
}

void LayerNorm::release_activations() {
  y_.release();
  mean_.release();
  rstd_.release();
  dx_.release();
}

}  // namespace braid::nn
