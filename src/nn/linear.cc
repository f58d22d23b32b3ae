// Linear: y = x Wᵀ + b, and its backward, as three sgemm calls whose
// transposes are flags (no copies); with an activation, fused with the
// bias (bias_gelu.h).
#include "../tensor/simd.h"  // first: sets vectorisation options
#include <algorithm>
#include <vector>

#include "braid/error.h"
#include "braid/kernels.h"
#include "braid/layers.h"
#include "braid/precision.h"
#include "nn/bias_gelu.h"
#include "nn/wide_scratch.h"

namespace braid::nn {

Linear::Linear(std::string name, int64_t in, int64_t out, bool bias)
    : Module(std::move(name)),
      in_(in),
      out_(out),
      has_bias_(bias),
      w_(name_ + ".weight", {out, in}),
      b_(name_ + ".bias", {bias ? out : 0}, false) {
  BRAID_CHECK_ARG(in > 0 && out > 0, "Linear " + name_ + ": sizes must be positive");
}

void Linear::set_activation(Activation a) {
  BRAID_CHECK_ARG(a == Activation::kNone || has_bias_,
                  "Linear " + name_ + ": a fused activation needs the bias");
  BRAID_CHECK_ARG(a == Activation::kNone || !shared_output_,
                  "Linear " + name_ + ": a fused activation with a shared output");
  act_ = a;
}

void Linear::set_shared_output(bool on) {
  BRAID_CHECK_ARG(!on || (act_ == Activation::kNone && !bf16_output_),
                  "Linear " + name_ + ": a shared output needs no activation and f32 output");
  shared_output_ = on;
  if (on) y_.release();
}

namespace {
BRAID_SIMD_FN void fill_rows(float* y, const float* b, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = b[c];
}
}  // namespace

namespace {
// col_sum_acc over an f32 or bf16 dy (widened a block of rows at a time:
// the same row order).
void col_sum_any(const Tensor& dy, int64_t rows, int64_t cols, float* out) {
  if (dy.dtype() == DType::kF32) {
    col_sum_acc(dy.f32(), rows, cols, out);
    return;
  }
  constexpr int64_t kRows = 16;
  std::vector<float> w(size_t(kRows * cols));
  for (int64_t r0 = 0; r0 < rows; r0 += kRows) {
    const int64_t n = std::min(kRows, rows - r0);
    convert_bf16_to_f32(dy.bf16() + r0 * cols, w.data(), size_t(n * cols));
    col_sum_acc(w.data(), n, cols, out);
  }
}

// The weight [out, in] as the GEMMs of one call over `blocks` row blocks
// take it: under bf16 with several blocks, rounded once here as each
// block's gemm_compute would round it (the same products, bit for bit),
// instead of once a block; otherwise the f32 weight.
GemmOperand weight_operand(const Tensor& w, int64_t out, int64_t in, int64_t blocks) {
  if (compute_precision() != Precision::kBF16 || blocks < 2) return gemm_operand(w.f32(), in);
  thread_local std::vector<uint16_t> w16;
  w16.resize(size_t(out * in));
  round_rows_to_bf16(w.f32(), out, in, in, w16.data(), in);
  return {w16.data(), DType::kBF16, in};
}

// Row r of a [*, ld] operand.
GemmOperand row_of(const GemmOperand& x, int64_t r) {
  return {static_cast<const char*>(x.data) + r * x.ld * int64_t(dtype_size(x.dtype)), x.dtype,
          x.ld};
}
}  // namespace

const Tensor& Linear::forward(const Tensor& x, Context&) {
  const int64_t rows = rows_of_width(x, in_, "Linear", name_);
  Shape ys = x.shape();
  ys.back() = out_;
  x_ = &x;
  y_shape_ = ys;
  const GemmOperand xin{x.raw(), x.dtype(), in_};
  const DType out_dt = bf16_output_ ? activation_dtype() : DType::kF32;
  if (act_ == Activation::kGelu) {
    if (out_dt == DType::kBF16) {
      // The pre-activation too is kept in bf16 (GELU's backward reads it).
      y_.resize(ys, DType::kBF16);
      a_.resize(ys, DType::kBF16);
      const GemmOperand w = weight_operand(w_.data, out_, in_, row_block_count(rows, out_));
      in_row_blocks(rows, out_, [&](int64_t r0, int64_t n) {
        float* pre = wide_scratch({n, out_});
        gemm_compute(false, true, n, out_, in_, 1.0f, row_of(xin, r0), w, 0.0f, pre, out_);
        bias_gelu_forward_bf16(pre, b_.data.f32(), y_.bf16() + r0 * out_, a_.bf16() + r0 * out_, n,
                               out_);
      });
      return a_;
    }
    y_.resize(ys, DType::kF32);
    gemm_compute(false, true, rows, out_, in_, 1.0f, xin, gemm_operand(w_.data.f32(), in_), 0.0f,
                 y_.f32(), out_);
    a_.resize(ys, DType::kF32);
    bias_gelu_forward(y_.f32(), b_.data.f32(), a_.f32(), rows, out_);
    return a_;
  }
  if (out_dt == DType::kBF16) {
    y_.resize(ys, DType::kBF16);
    const GemmOperand w = weight_operand(w_.data, out_, in_, row_block_count(rows, out_));
    in_row_blocks(rows, out_, [&](int64_t r0, int64_t n) {
      float* y = wide_scratch({n, out_});
      float beta = 0.0f;
      if (has_bias_) {
        fill_rows(y, b_.data.f32(), n, out_);
        beta = 1.0f;
      }
      gemm_compute(false, true, n, out_, in_, 1.0f, row_of(xin, r0), w, beta, y, out_);
      round_rows_to_bf16(y, n, out_, out_, y_.bf16() + r0 * out_, out_);
    });
    return y_;
  }
  // The shared buffer: one per thread, for every Linear set so.
  thread_local Tensor shared;
  Tensor& y = shared_output_ ? shared : y_;
  y.resize(ys, DType::kF32);
  float beta = 0.0f;
  if (has_bias_) {
    fill_rows(y.f32(), b_.data.f32(), rows, out_);
    beta = 1.0f;
  }
  gemm_compute(false, true, rows, out_, in_, 1.0f, xin, gemm_operand(w_.data.f32(), in_), beta,
               y.f32(), out_);
  return y;
}

const Tensor& Linear::backward(const Tensor& dy_in, Context& ctx) {
  BRAID_CHECK_ARG(x_ != nullptr, "Linear " + name_ + ": backward before forward");
  const Shape& ys = y_shape_;
  if (dy_in.shape() != ys)
    throw Error(Errc::kInvalidArgument, "Linear " + name_ + " backward: dy vs y: shapes " +
                                            shape_str(dy_in.shape()) + " and " + shape_str(ys) +
                                            " differ");
  const int64_t rows = dy_in.numel() / out_;
  GemmOperand dy{dy_in.raw(), dy_in.dtype(), out_};
  BRAID_CHECK_ARG(
      dy_in.dtype() == DType::kF32 || (dy_in.dtype() == DType::kBF16 &&
                                       (act_ == Activation::kNone || y_.dtype() == DType::kBF16)),
      "Linear " + name_ + " backward: dy is " + dtype_name(dy_in.dtype()) +
          " (f32, or bf16 where the output is kept in bf16)");
  if (act_ == Activation::kGelu) {
    // dL/d(x Wᵀ + b) and the bias gradient in one pass; under bf16 kept
    // rounded, as both GEMMs below would round it.
    const bool dy16 = dy_in.dtype() == DType::kBF16;
    if (y_.dtype() == DType::kBF16) {
      dpre_.resize(ys, DType::kBF16);
      bias_gelu_backward_bf16(y_.bf16(), dy16 ? nullptr : dy_in.f32(),
                              dy16 ? dy_in.bf16() : nullptr, dpre_.bf16(), b_.grad.f32(), rows,
                              out_);
    } else if (activation_dtype() == DType::kBF16) {
      float* dpre = wide_scratch(ys);
      bias_gelu_backward(y_.f32(), dy_in.f32(), dpre, b_.grad.f32(), rows, out_);
      keep_rounded(dpre, ys, dpre_);
    } else {
      dpre_.resize(ys, DType::kF32);
      bias_gelu_backward(y_.f32(), dy_in.f32(), dpre_.f32(), b_.grad.f32(), rows, out_);
    }
    dy = {dpre_.raw(), dpre_.dtype(), out_};
  }
  // dW += dyᵀ x  ([out, rows] · [rows, in])
  gemm_compute(true, false, out_, in_, rows, 1.0f, dy, GemmOperand{x_->raw(), x_->dtype(), in_},
               1.0f, w_.grad.f32(), in_);
  ctx.param_ready(w_);
  if (has_bias_) {
    if (act_ == Activation::kNone) col_sum_any(dy_in, rows, out_, b_.grad.f32());
    ctx.param_ready(b_);
  }
  if (!input_grad_) {
    dx_.resize({0});
    return dx_;
  }
  // dx = dy W  ([rows, out] · [out, in])
  if (bf16_input_grad_ && activation_dtype() == DType::kBF16) {
    dx_.resize(x_->shape(), DType::kBF16);
    const GemmOperand w = weight_operand(w_.data, out_, in_, row_block_count(rows, in_));
    in_row_blocks(rows, in_, [&](int64_t r0, int64_t n) {
      float* dx = wide_scratch({n, in_});
      gemm_compute(false, false, n, in_, out_, 1.0f, row_of(dy, r0), w, 0.0f, dx, in_);
      round_rows_to_bf16(dx, n, in_, in_, dx_.bf16() + r0 * in_, in_);
    });
    return dx_;
  }
  dx_.resize(x_->shape(), DType::kF32);
  gemm_compute(false, false, rows, in_, out_, 1.0f, dy, gemm_operand(w_.data.f32(), in_), 0.0f,
               dx_.f32(), in_);
  return dx_;
}

void Linear::collect_parameters(std::vector<Parameter*>& out) {
  out.push_back(&w_);
  if (has_bias_) out.push_back(&b_);
}

void Linear::release_activations() {
  y_.release();
  dx_.release();
  a_.release();
  dpre_.release();
}

}  // namespace braid::nn
