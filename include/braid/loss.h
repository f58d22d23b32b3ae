// Softmax cross-entropy over rows of logits, forward and backward fused.
#pragma once

#include <cstdint>

#include "braid/tensor.h"

namespace braid::nn {

class SoftmaxCrossEntropy {
 public:
  // logits: f32 [..., V] (rows = numel / V); targets: i32 with one entry
  // per row, each in [0, V). Returns the SUM over rows of −log p[target]
  // (in double) so that callers can form the mean over a global batch that
  // is split across micro-batches and ranks. Keeps the probabilities.
  // Throws naming both shapes when the row counts differ, and naming the
  // value when a target is out of range.
  double forward(const Tensor& logits, const Tensor& targets);
  // dL/dlogits = scale · (p − onehot(target)). For the mean over a global
  // batch of N rows pass scale = 1/N. Returns a buffer this object owns.
  const Tensor& backward(float scale);
  // Rows of the last forward whose argmax equals the target.
  int64_t correct() const { return correct_; }

 private:
  Tensor probs_, dlogits_;
  const Tensor* targets_ = nullptr;
  int64_t correct_ = 0;
};

}  // namespace braid::nn
