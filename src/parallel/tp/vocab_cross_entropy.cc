// Softmax cross-entropy over vocabulary-split logits. Per row the softmax
// needs only three numbers from the whole vocabulary: the max (for a safe
// exponent), Σ exp(x − max) and the target's logit; those are reduced over
// the group, and each rank normalises its own block. Two all_reduces of a
// few floats per row replace gathering rows × V logits.
#include "../../tensor/simd.h"  // first: sets vectorisation options
#include <algorithm>
#include <cmath>

#include "braid/error.h"
#include "braid/tp_layers.h"

namespace braid::parallel::tp {

VocabParallelCrossEntropy::VocabParallelCrossEntropy(std::shared_ptr<Communicator> tp)
    : tp_(std::move(tp)) {}

namespace {
BRAID_SIMD_FN float row_max(const float* x, int64_t v) {
  float m = x[0];
  for (int64_t j = 1; j < v; ++j) m = x[j] > m ? x[j] : m;
  return m;
}
// p = exp(x − m) over this rank's block; returns their sum.
BRAID_SIMD_FN float row_exp(const float* x, float* p, int64_t v, float m) {
  float s = 0;
  for (int64_t j = 0; j < v; ++j) {
    float e = simd::exp_approx(x[j] - m);
    p[j] = e;
    s += e;
  }
  return s;
}
}  // namespace

double VocabParallelCrossEntropy::forward(const Tensor& logits, const Tensor& targets) {
  if (logits.ndim() < 1 || logits.dim(-1) < 1)
    throw Error(Errc::kInvalidArgument, "vocab-parallel cross-entropy: logits " +
                                            shape_str(logits.shape()) +
                                            " need a non-empty class dimension");
  const int64_t v = logits.dim(-1), rows = logits.numel() / v, vocab = v * tp_->size();
  if (targets.numel() != rows)
    throw Error(Errc::kInvalidArgument, "vocab-parallel cross-entropy: logits " +
                                            shape_str(logits.shape()) + " vs targets " +
                                            shape_str(targets.shape()) +
                                            " (need one target per row)");
  v0_ = v * tp_->rank();
  const float* x = logits.f32();
  const int32_t* t = targets.i32();
  for (int64_t r = 0; r < rows; ++r)
    if (t[r] < 0 || t[r] >= vocab)
      throw Error(Errc::kInvalidArgument, "vocab-parallel cross-entropy: target " +
                                              std::to_string(t[r]) + " outside [0, " +
                                              std::to_string(vocab) + ")");
  // row_stats_: [rows] maxima, then [rows] sums of exponentials, [rows]
  // target logits (the rank that holds the target adds it, the others 0) and
  // [rows] counts of maximal logits at indices below the target (the serial
  // argmax takes the first maximum, so the row is correct only when the
  // target is maximal and this count is 0; small integers are exact in f32).
  row_stats_.resize({4 * rows}, DType::kF32);
  float* max = row_stats_.f32();
  float* sum = max + rows;
  float* target = sum + rows;
  float* before = target + rows;
  for (int64_t r = 0; r < rows; ++r) max[r] = row_max(x + r * v, v);
  tp_->all_reduce(max, max, size_t(rows), DType::kF32, ReduceOp::kMax);
  probs_.resize(logits.shape(), DType::kF32);
  float* p = probs_.f32();
  for (int64_t r = 0; r < rows; ++r) {
    sum[r] = row_exp(x + r * v, p + r * v, v, max[r]);
    int64_t local = int64_t(t[r]) - v0_;
    target[r] = local >= 0 && local < v ? x[r * v + local] : 0.0f;
    const int64_t below = std::min<int64_t>(std::max<int64_t>(local, 0), v);
    int64_t ties = 0;
    for (int64_t j = 0; j < below; ++j) ties += x[r * v + j] == max[r];
    before[r] = float(ties);
  }
  tp_->all_reduce(sum, sum, size_t(3 * rows), DType::kF32, ReduceOp::kSum);
  double loss = 0;
  int64_t correct = 0;
  for (int64_t r = 0; r < rows; ++r) {
    float inv = 1.0f / sum[r];
    for (int64_t j = 0; j < v; ++j) p[r * v + j] *= inv;
    // −log p_y = log Σ exp(x − m) − (x_y − m), as the serial loss forms it.
    loss += double(std::log(sum[r])) - double(target[r] - max[r]);
    correct += target[r] >= max[r] && before[r] == 0;
  }
  keep(targets, correct);
  return loss;
}

const Tensor& VocabParallelCrossEntropy::backward(float scale) {
  begin_backward("vocab-parallel cross-entropy");
  const int64_t v = probs_.dim(-1), rows = probs_.numel() / v;
  const float* p = probs_.f32();
  float* d = dlogits_.f32();
  const int32_t* t = targets_->i32();
  for (int64_t i = 0; i < rows * v; ++i) d[i] = scale * p[i];
  for (int64_t r = 0; r < rows; ++r) {
    int64_t local = int64_t(t[r]) - v0_;
    if (local >= 0 && local < v) d[r * v + local] -= scale;
  }
  return dlogits_;
}

}  // namespace braid::parallel::tp
