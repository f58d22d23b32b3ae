// EmbeddingBag: forward gathers and pools each sample's rows; backward
// scatters dy into the distinct rows the batch touched (the sparse
// gradient) and, when asked, adds those rows into the dense table gradient.
#include <algorithm>

#include "braid/error.h"
#include "braid/layers.h"

namespace braid::nn {

namespace {
// The pooling weight of every real id of bag `b`: 1 for a sum, 1/count for
// a mean (0 when the bag holds padding only; it then has no real id).
float bag_weight(const int32_t* ids, int64_t bag, EmbeddingBag::Mode mode) {
  if (mode == EmbeddingBag::Mode::kSum) return 1.0f;
  int64_t n = 0;
  for (int64_t j = 0; j < bag; ++j) n += ids[j] >= 0;
  return n > 0 ? 1.0f / float(n) : 0.0f;
}
}  // namespace

EmbeddingBag::EmbeddingBag(std::string name, int64_t rows, int64_t dim, Mode mode)
    : Module(std::move(name)), rows_(rows), dim_(dim), mode_(mode),
      w_(name_ + ".weight", {rows, dim}, false) {
  BRAID_CHECK_ARG(rows > 0 && dim > 0, "EmbeddingBag " + name_ + ": rows and dim must be positive");
  input_grad_ = false;
}

const Tensor& EmbeddingBag::forward(const Tensor& x, Context&) {
  if (x.ndim() != 2 || x.dtype() != DType::kI32)
    throw Error(Errc::kInvalidArgument, "EmbeddingBag " + name_ + ": ids " +
                                            shape_str(x.shape()) +
                                            " vs expected i32 [batch, bag]");
  const int64_t B = x.dim(0), bag = x.dim(1);
  const int32_t* ids = x.i32();
  for (int64_t i = 0; i < x.numel(); ++i)
    if (ids[i] < -1 || ids[i] >= rows_)
      throw Error(Errc::kInvalidArgument, "EmbeddingBag " + name_ + ": id " +
                                              std::to_string(ids[i]) + " outside [0, " +
                                              std::to_string(rows_) + ") (−1 is padding)");
  y_.resize({B, dim_}, DType::kF32);
  y_.zero();
  const float* w = w_.data.f32();
  float* y = y_.f32();
  for (int64_t b = 0; b < B; ++b) {
    const int32_t* row_ids = ids + b * bag;
    const float s = bag_weight(row_ids, bag, mode_);
    float* yb = y + b * dim_;
    for (int64_t j = 0; j < bag; ++j) {
      if (row_ids[j] < 0) continue;
      const float* e = w + int64_t(row_ids[j]) * dim_;
      for (int64_t c = 0; c < dim_; ++c) yb[c] += s * e[c];
    }
  }
  x_ = &x;
  return y_;
}

const Tensor& EmbeddingBag::backward(const Tensor& dy, Context& ctx) {
  BRAID_CHECK_ARG(x_ != nullptr, "EmbeddingBag " + name_ + ": backward before forward");
  check_same_shape(dy, y_, "EmbeddingBag " + name_ + " backward: dy vs y");
  const int64_t B = x_->dim(0), bag = x_->dim(1);
  const int32_t* ids = x_->i32();
  touched_.clear();
  for (int64_t i = 0; i < x_->numel(); ++i)
    if (ids[i] >= 0) touched_.push_back(ids[i]);
  std::sort(touched_.begin(), touched_.end());
  touched_.erase(std::unique(touched_.begin(), touched_.end()), touched_.end());
  const int64_t U = int64_t(touched_.size());
  row_grads_.resize({U, dim_}, DType::kF32);
  row_grads_.zero();
  float* g = row_grads_.f32();
  const float* d = dy.f32();
  for (int64_t b = 0; b < B; ++b) {
    const int32_t* row_ids = ids + b * bag;
    const float s = bag_weight(row_ids, bag, mode_);
    const float* db = d + b * dim_;
    for (int64_t j = 0; j < bag; ++j) {
      if (row_ids[j] < 0) continue;
      const auto slot = std::lower_bound(touched_.begin(), touched_.end(), int64_t(row_ids[j])) -
                        touched_.begin();
      float* gr = g + slot * dim_;
      for (int64_t c = 0; c < dim_; ++c) gr[c] += s * db[c];
    }
  }
  if (dense_grad_) {
    float* wg = w_.grad.f32();
    for (int64_t u = 0; u < U; ++u) {
      float* dst = wg + touched_[size_t(u)] * dim_;
      const float* src = g + u * dim_;
      for (int64_t c = 0; c < dim_; ++c) dst[c] += src[c];
    }
  }
  ctx.param_ready(w_);
  return empty_;
}

void EmbeddingBag::collect_parameters(std::vector<Parameter*>& out) { out.push_back(&w_); }

void EmbeddingBag::release_activations() { y_.release(); }

}  // namespace braid::nn
