// A small separable classification problem for training tests: 480
// samples of 12 features in 4 classes (class c lifts features c, c+4 and
// c+8 by 0.8 over a fixed hash pattern in [-0.5, 0.5)).
#pragma once

#include <cstdint>
#include <vector>

#include "braid/data.h"

namespace braid::testing {

class Blobs : public nn::Dataset {
 public:
  Blobs() {
    for (int64_t i = 0; i < size(); ++i)
      for (int j = 0; j < 12; ++j) {
        uint64_t h = (uint64_t(i) * 2654435761u + uint64_t(j) * 40503u) % 1000;
        x_[size_t(i * 12 + j)] = float(h) / 1000.0f - 0.5f + (j % 4 == i % 4 ? 0.8f : 0.0f);
      }
  }
  int64_t size() const override { return 480; }
  int64_t targets_per_sample() const override { return 1; }
  void gather(const int64_t* idx, int64_t n, Tensor& x, Tensor& y) const override {
    x.resize({n, 12}, DType::kF32);
    y.resize({n}, DType::kI32);
    for (int64_t r = 0; r < n; ++r) {
      for (int j = 0; j < 12; ++j) x.f32()[r * 12 + j] = x_[size_t(idx[r] * 12 + j)];
      y.i32()[r] = int32_t(idx[r] % 4);
    }
  }

 private:
  std::vector<float> x_ = std::vector<float>(480 * 12);
};

}  // namespace braid::testing
