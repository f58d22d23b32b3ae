// LayerNorm over the last dimension, forward and backward (llm.c's form:
// dx = rstd · (dŷ − mean(dŷ) − x̂ · mean(dŷ · x̂)), dŷ = dy · γ), and the
// pre-norm block's residual add fused into each direction.
#include "../tensor/simd.h"  // first: sets vectorisation options
#include <algorithm>
#include <cmath>
#include <vector>

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
// Rows [r0, r1): y = (h − mean) · rstd · γ + β over each row of h, where
// h = x, or h = x + a written to `h` when a is given (the residual add).
BRAID_SIMD_FN void ln_fwd_rows(const float* x, const float* a, float* h, const float* g,
                               const float* b, float* y, float* mean, float* rstd, int64_t r0,
                               int64_t r1, int64_t d, float eps) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * d;
    float* yr = y + r * d;
    float s = 0;
    if (a) {
      const float* ar = a + r * d;
      float* hr = h + r * d;
      for (int64_t i = 0; i < d; ++i) {
        hr[i] = xr[i] + ar[i];
        s += hr[i];
      }
      xr = hr;
    } else {
      for (int64_t i = 0; i < d; ++i) s += xr[i];
    }
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

void ln_fwd(const float* x, const float* a, float* h, const float* g, const float* b, float* y,
            float* mean, float* rstd, int64_t rows, int64_t d, float eps) {
  simd::parallel_ranges(rows, d >= (1 << 16) ? 1 : (1 << 16) / d, [&](int64_t r0, int64_t r1) {
    ln_fwd_rows(x, a, h, g, b, y, mean, rstd, r0, r1, d, eps);
  });
}

// Rows per chunk of the backward: the chunks run in parallel, each adding
// its rows' dγ, dβ into a partial of its own; the partials are then added
// in chunk order, so the sums are the same at any thread count.
constexpr int64_t kBwdChunkRows = 64;

// Rows [r0, r1) of the backward: dx = res + rstd · (dŷ − mean(dŷ) − x̂ ·
// mean(dŷ · x̂)) (without res where it is null; nothing where dx is
// null), and the rows' dγ, dβ added into dg, db. dy is f32 (dy32) or bf16
// (dy16, widened a row at a time into `row`, exactly).
BRAID_SIMD_FN void ln_bwd_rows(const float* x, const float* g, const float* mean,
                               const float* rstd, const float* dy32, const uint16_t* dy16,
                               const float* res, float* dx, float* dg, float* db, int64_t r0,
                               int64_t r1, int64_t d, float* row) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * d;
    const float* dyr = dy32 ? dy32 + r * d : row;
    if (!dy32) {
      const uint16_t* src = dy16 + r * d;
      for (int64_t i = 0; i < d; ++i) row[i] = bf16_to_f32(src[i]);
    }
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
    if (!dx) continue;
    float* dxr = dx + r * d;
    if (res) {
      const float* rr = res + r * d;
      for (int64_t i = 0; i < d; ++i) {
        float xh = (xr[i] - m) * rs;
        dxr[i] = rr[i] + rs * (dyr[i] * g[i] - a - xh * c);
      }
    } else {
      for (int64_t i = 0; i < d; ++i) {
        float xh = (xr[i] - m) * rs;
        dxr[i] = rs * (dyr[i] * g[i] - a - xh * c);
      }
    }
  }
}

BRAID_SIMD_FN void add_partials(const float* part, int64_t chunks, int64_t stride, int64_t c0,
                                int64_t c1, float* out) {
  for (int64_t k = 0; k < chunks; ++k)
    for (int64_t i = c0; i < c1; ++i) out[i] += part[k * stride + i];
}

void ln_bwd(const float* x, const float* g, const float* mean, const float* rstd,
            const float* dy32, const uint16_t* dy16, const float* res, float* dx, float* dg,
            float* db, int64_t rows, int64_t d) {
  const int64_t chunks = (rows + kBwdChunkRows - 1) / kBwdChunkRows;
  // Per chunk: [dγ | dβ], 2d floats.
  thread_local std::vector<float> part;
  part.assign(size_t(chunks * 2 * d), 0.0f);
  float* pp = part.data();
  simd::parallel_ranges(chunks, 2, [&](int64_t k0, int64_t k1) {
    thread_local std::vector<float> row;
    if (dy16 && row.size() < size_t(d)) row.resize(size_t(d));
    for (int64_t k = k0; k < k1; ++k) {
      float* pg = pp + k * 2 * d;
      ln_bwd_rows(x, g, mean, rstd, dy32, dy16, res, dx, pg, pg + d, k * kBwdChunkRows,
                  std::min(rows, (k + 1) * kBwdChunkRows), d, row.data());
    }
  });
  // dγ and dβ as one [2d] row: columns split over the threads.
  simd::parallel_ranges(2 * d, 1 << 12, [&](int64_t c0, int64_t c1) {
    // out is dg for columns < d, db after.
    if (c0 < d) add_partials(pp, chunks, 2 * d, c0, std::min(c1, d), dg);
    if (c1 > d) add_partials(pp + d, chunks, 2 * d, std::max(c0, d) - d, c1 - d, db);
  });
}
}  // namespace

const Tensor& LayerNorm::forward(const Tensor& x, Context&) {
  return normalize(x, nullptr, nullptr);
}

const Tensor& LayerNorm::forward_add(const Tensor& x, const Tensor& a, Tensor& h, Context&) {
  check_same_shape(a, x, "LayerNorm " + name_ + " forward_add: a vs x");
  BRAID_CHECK_ARG(a.dtype() == DType::kF32 && x.dtype() == DType::kF32,
                  "LayerNorm " + name_ + " forward_add: x and a must be f32");
  BRAID_CHECK_ARG(&h != &x && &h != &a, "LayerNorm " + name_ + " forward_add: h aliases an input");
  h.resize(x.shape(), DType::kF32);
  return normalize(x, a.f32(), &h);
}

// y = ln(x), or y = ln(x + a) with x + a written to *h; backward then
// reads x, or *h.
const Tensor& LayerNorm::normalize(const Tensor& x, const float* a, Tensor* h) {
  const int64_t rows = rows_of_width(x, dim_, "LayerNorm", name_);
  const bool narrow = bf16_output_ && activation_dtype() == DType::kBF16;
  mean_.resize({rows}, DType::kF32);
  rstd_.resize({rows}, DType::kF32);
  const float* xp = x.f32();
  float* hp = a ? h->f32() : nullptr;
  if (narrow) {  // row by row: blocks of rows through the scratch
    y_.resize(x.shape(), DType::kBF16);
    in_row_blocks(rows, dim_, [&](int64_t r0, int64_t n) {
      float* y = wide_scratch({n, dim_});
      const int64_t o = r0 * dim_;
      ln_fwd(xp + o, a ? a + o : nullptr, a ? hp + o : nullptr, g_.data.f32(), b_.data.f32(), y,
             mean_.f32() + r0, rstd_.f32() + r0, n, dim_, eps_);
      round_rows_to_bf16(y, n, dim_, dim_, y_.bf16() + o, dim_);
    });
  } else {
    y_.resize(x.shape(), DType::kF32);
    ln_fwd(xp, a, hp, g_.data.f32(), b_.data.f32(), y_.f32(), mean_.f32(), rstd_.f32(), rows, dim_,
           eps_);
  }
  x_ = a ? h : &x;
  return y_;
}

const Tensor& LayerNorm::backward(const Tensor& dy, Context& ctx) {
  float* dx = nullptr;
  if (input_grad_) {
    dx_.resize(dy.shape(), DType::kF32);
    dx = dx_.f32();
  } else {
    dx_.resize({0});
  }
  run_backward(dy, nullptr, dx, ctx);
  return dx_;
}

void LayerNorm::backward_add(const Tensor& dy, const Tensor& res, Tensor& dx, Context& ctx) {
  // dy is checked against the input by run_backward.
  check_same_shape(res, dy, "LayerNorm " + name_ + " backward_add: res vs dy");
  BRAID_CHECK_ARG(res.dtype() == DType::kF32,
                  "LayerNorm " + name_ + " backward_add: res must be f32");
  if (&dx != &res) dx.resize(res.shape(), DType::kF32);
  run_backward(dy, res.f32(), dx.f32(), ctx);
}

void LayerNorm::run_backward(const Tensor& dy, const float* res, float* dx, Context& ctx) {
  BRAID_CHECK_ARG(x_ != nullptr, "LayerNorm " + name_ + ": backward before forward");
  check_same_shape(dy, *x_, "LayerNorm " + name_ + " backward: dy vs x");
  BRAID_CHECK_ARG(dy.dtype() == DType::kF32 || dy.dtype() == DType::kBF16,
                  "LayerNorm " + name_ + " backward: dy is " + dtype_name(dy.dtype()) +
                      " (f32 or bf16)");
  const bool d16 = dy.dtype() == DType::kBF16;
  ln_bwd(x_->f32(), g_.data.f32(), mean_.f32(), rstd_.f32(), d16 ? nullptr : dy.f32(),
         d16 ? dy.bf16() : nullptr, res, dx, g_.grad.f32(), b_.grad.f32(), dy.numel() / dim_,
         dim_);
  ctx.param_ready(g_);
  ctx.param_ready(b_);
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
