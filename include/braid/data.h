// Data sets and the sampler.
//
// A Dataset turns a list of sample indices into an input tensor and a
// target tensor. The Sampler decides which indices form global batch b and
// which contiguous part of it belongs to rank r of a world of w, so the
// union over ranks of the shards of batch b is exactly the serial batch b,
// in the same order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "braid/tensor.h"

namespace braid::nn {

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;  // number of samples
  // Targets per sample (1 for an image label, T for a text window): the
  // loss is a mean over size × this rows.
  virtual int64_t targets_per_sample() const = 0;
  // x, y ← the samples idx[0..n). Resizes x and y (no allocation once they
  // have held a batch this large). Throws on an index outside [0, size()).
  virtual void gather(const int64_t* idx, int64_t n, Tensor& x, Tensor& y) const = 0;
};

// Fashion-MNIST from idx files (gzip-compressed or not). Images are kept
// as bytes (47 MB for train) and standardised to f32 in gather,
// x = (pixel/255 − kMean) / kStd: x [n, 784], y i32 [n].
class FashionMnist : public Dataset {
 public:
  // Where Debian's dataset-fashion-mnist package puts the files; the
  // BRAID_FASHION_MNIST_DIR environment variable overrides it.
  static std::string default_dir();
  // split: "train" (60 000) or "test" (10 000). Looks for
  // {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] in dir. Throws
  // Error(kIo) naming the directory and the Debian package when missing,
  // Error(kCorrupt) for a malformed file.
  FashionMnist(const std::string& split, const std::string& dir = default_dir());

  int64_t size() const override { return n_; }
  int64_t targets_per_sample() const override { return 1; }
  void gather(const int64_t* idx, int64_t n, Tensor& x, Tensor& y) const override;
  static constexpr int64_t kPixels = 784;
  static constexpr int64_t kClasses = 10;
  static constexpr float kMean = 0.2860f, kStd = 0.3530f;
  const uint8_t* image(int64_t i) const { return images_.data() + i * kPixels; }
  int label(int64_t i) const { return labels_[size_t(i)]; }

 private:
  int64_t n_ = 0;
  std::vector<uint8_t> images_, labels_;
};

// Byte-level language modelling on any file: sample i is the window
// bytes[i, i+T) with targets bytes[i+1, i+T+1). x, y: i32 [n, T].
// A file shorter than T+1 bytes throws naming the file and both sizes.
class ByteText : public Dataset {
 public:
  ByteText(const std::string& path, int64_t context);
  // Over an in-memory text (tests).
  ByteText(std::vector<uint8_t> bytes, int64_t context, std::string name);
  int64_t size() const override { return int64_t(bytes_.size()) - context_; }
  int64_t targets_per_sample() const override { return context_; }
  void gather(const int64_t* idx, int64_t n, Tensor& x, Tensor& y) const override;
  int64_t bytes() const { return int64_t(bytes_.size()); }
  const std::string& name() const { return name_; }
  // A file every Debian system has, used when no --data is given.
  static std::string default_path();

 private:
  std::vector<uint8_t> bytes_;
  int64_t context_;
  std::string name_;
};

// Synthetic click data drawn from a known "teacher" model, so the best
// reachable log loss is known. Sample i (train: i in [0, samples); test:
// the next test_samples indices) is a pure function of (seed, i):
//   dense x_d ~ N(0, 1), d < dense;
//   for each feature f < features, `bag` ids drawn from Zipf(zipf) over
//     [0, rows): P(k) ∝ (k+1)^−zipf, so id 0 is the most popular;
//   logit* = bias + Σ_f mean_j w_f[id_fj] + Σ_d v_d x_d with teacher weights
//     w_f[k] ~ N(0, id_std²) and v_d ~ N(0, dense_std² / dense), drawn once
//     from the seed;
//   label ~ Bernoulli(σ(logit*)).
// gather writes x f32 [n, dense + features·bag] in nn::Dlrm's input layout
// (dense values, then each feature's ids as exact f32 values) and y i32 [n]
// labels. Generation is O(N·(dense + features·bag·log rows)) at
// construction; the set is kept in memory (4·(dense + features·bag) + 5
// bytes per sample).
struct ClickConfig {
  int64_t samples = 262144;     // training samples
  int64_t test_samples = 16384;
  int64_t dense = 4;
  int64_t features = 8;
  int64_t rows = 1000;          // cardinality of every feature (≤ 2^24)
  int64_t bag = 1;
  double zipf = 1.1;            // α ≥ 0 (0: uniform)
  double id_std = 0.6;
  double dense_std = 1.0;
  double bias = -0.5;
  uint64_t seed = 1;
};

class ClickData : public Dataset {
 public:
  // split "train" or "test". Throws Error(kInvalidArgument) naming the
  // field for samples, test_samples, dense, features or bag < 1, rows
  // outside [1, 2^24], a negative zipf or std, or another split.
  ClickData(const ClickConfig& cfg, const std::string& split);
  int64_t size() const override { return n_; }
  int64_t targets_per_sample() const override { return 1; }
  void gather(const int64_t* idx, int64_t n, Tensor& x, Tensor& y) const override;

  const ClickConfig& config() const { return cfg_; }
  int64_t width() const { return cfg_.dense + cfg_.features * cfg_.bag; }
  // The entropy floor: the mean over this split's samples of the binary
  // entropy of σ(logit*), i.e. the expected log loss of the teacher's own
  // probabilities (no model can expect less on these features). Exact over
  // the generated set (double sums).
  double best_log_loss() const { return best_log_loss_; }
  // The log loss of a constant prediction at this split's click rate.
  double base_log_loss() const;
  double teacher_probability(int64_t i) const { return prob_[size_t(i)]; }
  int label(int64_t i) const { return label_[size_t(i)]; }
  int32_t id(int64_t i, int64_t feature, int64_t j = 0) const {
    return ids_[size_t((i * cfg_.features + feature) * cfg_.bag + j)];
  }
  const float* dense(int64_t i) const { return dense_.data() + i * cfg_.dense; }
  // P(id = k) under Zipf(alpha) over [0, rows).
  static double zipf_probability(int64_t rows, double alpha, int64_t k);

 private:
  ClickConfig cfg_;
  int64_t n_ = 0;
  std::vector<float> dense_;
  std::vector<int32_t> ids_;
  std::vector<uint8_t> label_;
  std::vector<double> prob_;
  double best_log_loss_ = 0;
};

// Deterministic batches: epoch e is a permutation of [0, size) drawn from
// (seed, e) (or the identity when !shuffle); global batch `step` is
// positions [b·B, (b+1)·B) of epoch step / steps_per_epoch, with
// b = step mod steps_per_epoch (the last partial batch of an epoch is
// dropped). Rank r of w gets the contiguous slice
// [r·B/w, (r+1)·B/w) (integer division) of that global batch.
class Sampler {
 public:
  Sampler(int64_t dataset_size, int64_t global_batch, uint64_t seed, bool shuffle = true,
          int rank = 0, int world = 1);
  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  int64_t global_batch() const { return batch_; }
  int rank() const { return rank_; }
  int world() const { return world_; }
  // [begin, end) of this rank's slice within a global batch.
  int64_t shard_begin() const { return shard_begin_; }
  int64_t shard_end() const { return shard_end_; }
  // This rank's indices of global batch `step` (out is resized).
  void shard(int64_t step, std::vector<int64_t>& out);
  // All indices of global batch `step` (what a world of 1 sees).
  void global(int64_t step, std::vector<int64_t>& out);

 private:
  const std::vector<int64_t>& epoch_order(int64_t epoch);
  int64_t size_, batch_;
  uint64_t seed_;
  bool shuffle_;
  int rank_, world_;
  int64_t steps_per_epoch_, shard_begin_, shard_end_;
  int64_t cached_epoch_ = -1;
  std::vector<int64_t> order_;
};

}  // namespace braid::nn
