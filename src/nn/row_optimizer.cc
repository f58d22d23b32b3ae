// RowGrads (a sparse gradient gathered over micro-batches) and the
// row-wise SGD / Adagrad updates of include/braid/row_optimizer.h.
#include "braid/row_optimizer.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "braid/error.h"

namespace braid::nn {

float* RowGrads::slot(int64_t row) {
  auto [it, fresh] = index_.try_emplace(row, int64_t(rows_.size()));
  if (fresh) {
    rows_.push_back(row);
    data_.resize(data_.size() + size_t(width_), 0.0f);
  }
  return data_.data() + it->second * width_;
}

void RowGrads::add(int64_t row, const float* g) {
  float* d = slot(row);
  for (int64_t c = 0; c < width_; ++c) d[c] += g[c];
}

void RowGrads::sorted(std::vector<int64_t>& rows, std::vector<const float*>& grads) const {
  std::vector<int64_t> order(rows_.size());
  std::iota(order.begin(), order.end(), int64_t(0));
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return rows_[size_t(a)] < rows_[size_t(b)]; });
  rows.resize(order.size());
  grads.resize(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    rows[i] = rows_[size_t(order[i])];
    grads[i] = data_.data() + order[i] * width_;
  }
}

void RowGrads::clear() {
  index_.clear();
  rows_.clear();
  data_.clear();
}

RowOptimizer RowOptimizer::parse(const std::string& name) {
  if (name == "sgd") return RowOptimizer(Kind::kSgd);
  if (name == "adagrad") return RowOptimizer(Kind::kAdagrad);
  throw Error(Errc::kInvalidArgument,
              "row-wise table optimizer '" + name + "': expected sgd or adagrad");
}

double row_square_sum(const float* g, int64_t n) {
  double s = 0;
  for (int64_t c = 0; c < n; ++c) s += double(g[c]) * double(g[c]);
  return s;
}

void RowOptimizer::update(float* w, int64_t width, float* state, const int64_t* rows,
                          const float* const* grads, const double* sq, int64_t n,
                          int64_t full_width, float lr) const {
  if (kind_ == Kind::kSgd) {
    for (int64_t i = 0; i < n; ++i) {
      float* wr = w + rows[i] * width;
      const float* g = grads[i];
      for (int64_t c = 0; c < width; ++c) wr[c] -= lr * g[c];
    }
    return;
  }
  BRAID_CHECK_ARG(state != nullptr, "row-wise adagrad: no state buffer");
  BRAID_CHECK_ARG(sq != nullptr || width == full_width,
                  "row-wise adagrad: a column shard needs the full rows' square sums");
  for (int64_t i = 0; i < n; ++i) {
    const float* g = grads[i];
    const double s2 = sq != nullptr ? sq[i] : row_square_sum(g, width);
    float& acc = state[rows[i]];
    acc += float(s2 / double(full_width));
    const float mult = lr / (std::sqrt(acc) + eps_);
    float* wr = w + rows[i] * width;
    for (int64_t c = 0; c < width; ++c) wr[c] -= mult * g[c];
  }
}

}  // namespace braid::nn
