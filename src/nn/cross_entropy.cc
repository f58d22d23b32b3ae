// Softmax cross-entropy: forward keeps p = softmax(logits) per row, the
// backward is the classic p − onehot, scaled.
#include "../tensor/simd.h"  // first: sets vectorisation options
#include <cmath>

#include "braid/error.h"
#include "braid/loss.h"

namespace braid::nn {

namespace {
// Softmax of one row; returns log Σ exp(x − max) and the max.
BRAID_SIMD_FN float softmax_row(const float* x, float* p, int64_t V, float* max_out) {
  float m = x[0];
  for (int64_t j = 1; j < V; ++j) m = x[j] > m ? x[j] : m;
  float s = 0;
  for (int64_t j = 0; j < V; ++j) {
    float e = simd::exp_approx(x[j] - m);
    p[j] = e;
    s += e;
  }
  float inv = 1.0f / s;
  for (int64_t j = 0; j < V; ++j) p[j] *= inv;
  *max_out = m;
  return s;
}
}  // namespace

double SoftmaxCrossEntropy::forward(const Tensor& logits, const Tensor& targets) {
  if (logits.ndim() < 1)
    throw Error(Errc::kInvalidArgument, "cross-entropy: logits must have a class dimension");
  int64_t V = logits.dim(-1);
  int64_t rows = V ? logits.numel() / V : 0;
  if (targets.numel() != rows)
    throw Error(Errc::kInvalidArgument, "cross-entropy: logits " + shape_str(logits.shape()) +
                                            " vs targets " + shape_str(targets.shape()) +
                                            " (need one target per row)");
  probs_.resize(logits.shape(), DType::kF32);
  const float* x = logits.f32();
  float* p = probs_.f32();
  const int32_t* t = targets.i32();
  double loss = 0;
  int64_t correct = 0;
  for (int64_t r = 0; r < rows; ++r) {
    int32_t y = t[r];
    if (y < 0 || y >= V)
      throw Error(Errc::kInvalidArgument, "cross-entropy: target " + std::to_string(y) +
                                              " outside [0, " + std::to_string(V) + ")");
    const float* xr = x + r * V;
    float m;
    float s = softmax_row(xr, p + r * V, V, &m);
    // −log p_y = log Σ exp(x − m) − (x_y − m), exact even when p_y underflows.
    loss += double(std::log(s)) - double(xr[y] - m);
    int64_t best = 0;
    for (int64_t j = 1; j < V; ++j)
      if (xr[j] > xr[best]) best = j;
    correct += best == y;
  }
  keep(targets, correct);
  return loss;
}

const Tensor& SoftmaxCrossEntropy::backward(float scale) {
  begin_backward("cross-entropy");
  int64_t V = probs_.dim(-1), rows = probs_.numel() / V;
  const float* p = probs_.f32();
  float* d = dlogits_.f32();
  const int32_t* t = targets_->i32();
  for (int64_t i = 0; i < rows * V; ++i) d[i] = scale * p[i];
  for (int64_t r = 0; r < rows; ++r) d[r * V + t[r]] -= scale;
  return dlogits_;
}

}  // namespace braid::nn
