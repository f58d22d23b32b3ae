// Fashion-MNIST idx reader (big-endian headers, optional gzip).
#include "../tensor/simd.h"  // first: sets vectorisation options
#include <sys/stat.h>

#include <algorithm>

#include "braid/data.h"
#include "braid/env.h"
#include "braid/error.h"
#include "gunzip.h"

namespace braid::nn {

namespace {
BRAID_SIMD_FN void standardise_row(const uint8_t* src, float* dst, int64_t n, float s, float o) {
  for (int64_t j = 0; j < n; ++j) dst[j] = float(src[j]) * s + o;
}

bool exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

uint32_t be32(const std::vector<uint8_t>& b, size_t off) {
  return uint32_t(b[off]) << 24 | uint32_t(b[off + 1]) << 16 | uint32_t(b[off + 2]) << 8 |
         uint32_t(b[off + 3]);
}

std::vector<uint8_t> load_idx(const std::string& dir, const std::string& stem) {
  for (const std::string& p : {dir + "/" + stem + ".gz", dir + "/" + stem})
    if (exists(p)) return read_file_maybe_gz(p);
  throw Error(Errc::kIo, "Fashion-MNIST file " + stem + "[.gz] not found in " + dir +
                             ": install the Debian package dataset-fashion-mnist "
                             "(apt-get install dataset-fashion-mnist) or point "
                             "BRAID_FASHION_MNIST_DIR / --data-dir at the idx files");
}
}  // namespace

std::string FashionMnist::default_dir() {
  if (auto d = env_str("BRAID_FASHION_MNIST_DIR")) return *d;
  return "/usr/share/datasets/fashion-mnist";
}

FashionMnist::FashionMnist(const std::string& split, const std::string& dir) {
  BRAID_CHECK_ARG(split == "train" || split == "test",
                  "Fashion-MNIST split must be 'train' or 'test', got '" + split + "'");
  std::string pre = split == "train" ? "train" : "t10k";
  images_ = load_idx(dir, pre + "-images-idx3-ubyte");
  labels_ = load_idx(dir, pre + "-labels-idx1-ubyte");
  auto bad = [&](const std::string& why) {
    throw Error(Errc::kCorrupt, "Fashion-MNIST " + split + " in " + dir + ": " + why);
  };
  if (images_.size() < 16 || be32(images_, 0) != 0x803) bad("images file has a bad idx header");
  if (labels_.size() < 8 || be32(labels_, 0) != 0x801) bad("labels file has a bad idx header");
  int64_t n = be32(images_, 4);
  if (be32(images_, 8) != 28 || be32(images_, 12) != 28) bad("images are not 28x28");
  if (int64_t(be32(labels_, 4)) != n) bad("image and label counts differ");
  if (int64_t(images_.size()) != 16 + n * kPixels) bad("images file size does not match its header");
  if (int64_t(labels_.size()) != 8 + n) bad("labels file size does not match its header");
  images_.erase(images_.begin(), images_.begin() + 16);
  labels_.erase(labels_.begin(), labels_.begin() + 8);
  images_.shrink_to_fit();
  for (uint8_t l : labels_)
    if (l >= kClasses) bad("label " + std::to_string(l) + " out of range");
  n_ = n;
}

void FashionMnist::gather(const int64_t* idx, int64_t n, Tensor& x, Tensor& y) const {
  x.resize({n, kPixels}, DType::kF32);
  y.resize({n}, DType::kI32);
  float* xp = x.f32();
  int32_t* yp = y.i32();
  // Standardised with the training set's pixel mean and std (0.2860,
  // 0.3530 on the [0, 1] scale), the usual Fashion-MNIST preprocessing.
  const float s = 1.0f / (255.0f * kStd), o = -kMean / kStd;
  for (int64_t i = 0; i < n; ++i)
    BRAID_CHECK_ARG(idx[i] >= 0 && idx[i] < n_,
                    "Fashion-MNIST index " + std::to_string(idx[i]) + " out of range");
  // The rows are scattered over 47 MB, so each is a run of cache misses:
  // ask for the lines of a row kAhead rows before converting it, so the
  // misses of several rows overlap (perf: the conversion was 2.6 % of a
  // 1-thread MLP step, almost all of it waiting on memory).
  constexpr int64_t kAhead = 4;
  auto prefetch_row = [&](int64_t i) {
    const uint8_t* p = images_.data() + idx[i] * kPixels;
    for (int64_t b = 0; b < kPixels; b += 64) __builtin_prefetch(p + b);
    __builtin_prefetch(p + kPixels - 1);  // rows do not start on a line
  };
  for (int64_t i = 0; i < std::min(n, kAhead); ++i) prefetch_row(i);
  for (int64_t i = 0; i < n; ++i) {
    if (i + kAhead < n) prefetch_row(i + kAhead);
    int64_t k = idx[i];
    const uint8_t* src = images_.data() + k * kPixels;
    float* dst = xp + i * kPixels;
    standardise_row(src, dst, kPixels, s, o);
    yp[i] = labels_[size_t(k)];
  }
}

}  // namespace braid::nn
