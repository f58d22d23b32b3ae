// Binary cross-entropy with logits; the contract is in include/braid/loss.h.
#include <algorithm>
#include <cmath>

#include "braid/error.h"
#include "braid/loss.h"

namespace braid::nn {

double BinaryCrossEntropyWithLogits::forward(const Tensor& logits, const Tensor& targets) {
  const int64_t rows = logits.numel();
  if (targets.numel() != rows)
    throw Error(Errc::kInvalidArgument, "binary cross-entropy: logits " +
                                            shape_str(logits.shape()) + " vs targets " +
                                            shape_str(targets.shape()) +
                                            " (need one target per logit)");
  probs_.resize(logits.shape(), DType::kF32);
  const float* z = logits.f32();
  const int32_t* t = targets.i32();
  float* p = probs_.f32();
  double loss = 0;
  int64_t correct = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t y = t[r];
    if (y != 0 && y != 1)
      throw Error(Errc::kInvalidArgument,
                  "binary cross-entropy: target " + std::to_string(y) + " is not 0 or 1");
    const double zr = z[r];
    // e = exp(−|z|) is in (0, 1]: neither the loss nor σ overflows for
    // any sign of z, and log1p keeps the tail where e is tiny.
    const double e = std::exp(-std::fabs(zr));
    loss += std::max(zr, 0.0) - zr * double(y) + std::log1p(e);
    p[r] = float(zr >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e));
    correct += (zr > 0) == (y == 1);
  }
  keep(targets, correct);
  return loss;
}

const Tensor& BinaryCrossEntropyWithLogits::backward(float scale) {
  begin_backward("binary cross-entropy");
  const float* p = probs_.f32();
  const int32_t* t = targets_->i32();
  float* d = dlogits_.f32();
  for (int64_t r = 0; r < probs_.numel(); ++r) d[r] = scale * (p[r] - float(t[r]));
  return dlogits_;
}

}  // namespace braid::nn
