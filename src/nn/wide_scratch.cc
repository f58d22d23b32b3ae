// The per-thread f32 scratch behind bf16-kept activations.
#include "nn/wide_scratch.h"

#include "braid/precision.h"

namespace braid::nn {

float* wide_scratch(const Shape& shape) {
  thread_local Tensor t;
  t.resize(shape, DType::kF32);
  return t.f32();
}

void keep_rounded(const float* wide, const Shape& shape, Tensor& kept) {
  kept.resize(shape, DType::kBF16);
  const int64_t cols = shape.empty() ? 1 : shape.back();
  const int64_t rows = cols == 0 ? 0 : kept.numel() / cols;
  round_rows_to_bf16(wide, rows, cols, cols, kept.bf16(), cols);
}

}  // namespace braid::nn
