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
