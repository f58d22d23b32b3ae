// ReLU and GELU (tanh approximation), forward and backward.
#include "../tensor/simd.h"  // first: sets vectorisation options
#include <cmath>

#include "braid/layers.h"
#include "nn/gelu.h"

namespace braid::nn {

namespace {
// Elementwise work below ~64K elements is not worth waking a second thread.
constexpr int64_t kParallelMin = 1 << 16;

BRAID_SIMD_FN void relu_fwd_range(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
BRAID_SIMD_FN void relu_bwd_range(const float* y, const float* dy, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

BRAID_SIMD_FN void gelu_fwd_range(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = gelu::value(x[i]);
}
BRAID_SIMD_FN void gelu_bwd_range(const float* x, const float* dy, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * gelu::grad(x[i]);
}

void relu_fwd(const float* x, float* y, int64_t n) {
  simd::parallel_ranges(n, kParallelMin, [&](int64_t b, int64_t e) { relu_fwd_range(x + b, y + b, e - b); });
}
void relu_bwd(const float* y, const float* dy, float* dx, int64_t n) {
  simd::parallel_ranges(n, kParallelMin,
                        [&](int64_t b, int64_t e) { relu_bwd_range(y + b, dy + b, dx + b, e - b); });
}
void gelu_fwd(const float* x, float* y, int64_t n) {
  simd::parallel_ranges(n, kParallelMin, [&](int64_t b, int64_t e) { gelu_fwd_range(x + b, y + b, e - b); });
}
void gelu_bwd(const float* x, const float* dy, float* dx, int64_t n) {
  simd::parallel_ranges(n, kParallelMin,
                        [&](int64_t b, int64_t e) { gelu_bwd_range(x + b, dy + b, dx + b, e - b); });
}
}  // namespace

const Tensor& ReLU::forward(const Tensor& x, Context&) {
  y_.resize(x.shape(), DType::kF32);
  relu_fwd(x.f32(), y_.f32(), x.numel());
  return y_;
}

const Tensor& ReLU::backward(const Tensor& dy, Context&) {
  check_same_shape(dy, y_, "ReLU " + name_ + " backward: dy vs y");
  dx_.resize(dy.shape(), DType::kF32);
  relu_bwd(y_.f32(), dy.f32(), dx_.f32(), dy.numel());
  return dx_;
}

void ReLU::release_activations() {
  y_.release();
  dx_.release();
}

const Tensor& GELU::forward(const Tensor& x, Context&) {
  y_.resize(x.shape(), DType::kF32);
  gelu_fwd(x.f32(), y_.f32(), x.numel());
  x_ = &x;
  return y_;
}

const Tensor& GELU::backward(const Tensor& dy, Context&) {
  check_same_shape(dy, y_, "GELU " + name_ + " backward: dy vs y");
  dx_.resize(dy.shape(), DType::kF32);
  gelu_bwd(x_->f32(), dy.f32(), dx_.f32(), dy.numel());
  return dx_;
}

void GELU::release_activations() {
  y_.release();
  dx_.release();
}

}  // namespace braid::nn
