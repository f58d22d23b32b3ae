// Losses over rows of logits, forward and backward fused: softmax
// cross-entropy (classes) and binary cross-entropy with logits (clicks).
#pragma once

#include <cstdint>
#include <string>

#include "braid/error.h"
#include "braid/tensor.h"

namespace braid::nn {

// What the training loop needs of a loss: forward returns the SUM over rows
// (in double) so that a mean over a global batch split across micro-batches
// and ranks can be formed; backward(scale) returns scale · dL/dlogits in a
// buffer the loss owns; correct() counts the rows of the last forward that
// the logits classify right.
class Loss {
 public:
  virtual ~Loss() = default;
  virtual double forward(const Tensor& logits, const Tensor& targets) = 0;
  virtual const Tensor& backward(float scale) = 0;
  virtual int64_t correct() const = 0;
};

// The state a loss over rows of logits keeps from forward to backward:
// the probabilities, the targets and the rows classified right, and the
// buffer backward returns.
class RowLoss : public Loss {
 public:
  int64_t correct() const override { return correct_; }

 protected:
  // End of forward: the targets (which must outlive backward) and the
  // count of correct rows.
  void keep(const Tensor& targets, int64_t correct) {
    targets_ = &targets;
    correct_ = correct;
  }
  // Start of backward: throws "<what>: backward before forward" unless a
  // forward ran; sizes dlogits_ as probs_.
  void begin_backward(const char* what) {
    if (targets_ == nullptr)
      throw Error(Errc::kInvalidArgument, std::string(what) + ": backward before forward");
    dlogits_.resize(probs_.shape(), DType::kF32);
  }

  Tensor probs_, dlogits_;
  const Tensor* targets_ = nullptr;
  int64_t correct_ = 0;
};

class SoftmaxCrossEntropy : public RowLoss {
 public:
  // logits: f32 [..., V] (rows = numel / V); targets: i32 with one entry
  // per row, each in [0, V). Returns the SUM over rows of −log p[target]
  // (in double) so that callers can form the mean over a global batch that
  // is split across micro-batches and ranks. Keeps the probabilities.
  // Throws naming both shapes when the row counts differ, and naming the
  // value when a target is out of range.
  double forward(const Tensor& logits, const Tensor& targets) override;
  // dL/dlogits = scale · (p − onehot(target)). For the mean over a global
  // batch of N rows pass scale = 1/N. Returns a buffer this object owns.
  const Tensor& backward(float scale) override;
  // correct(): rows of the last forward whose argmax equals the target.
};

// Binary cross-entropy with logits: one logit z per row (logits f32 of any
// shape; rows = numel), targets i32 0 or 1, one per row. The loss of a row
// is −[y log σ(z) + (1−y) log(1−σ(z))], computed as
// max(z, 0) − z·y + log1p(exp(−|z|)), which neither overflows nor loses
// the tail for large |z|. forward returns the SUM over rows (double) and
// keeps σ(z); backward(scale) = scale · (σ(z) − y). correct() counts rows
// with (z > 0) == y. Throws naming both shapes when the counts differ and
// naming the value when a target is not 0 or 1. O(rows).
class BinaryCrossEntropyWithLogits : public RowLoss {
 public:
  double forward(const Tensor& logits, const Tensor& targets) override;
  const Tensor& backward(float scale) override;
};

}  // namespace braid::nn
