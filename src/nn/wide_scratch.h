// Internal: the f32 buffer a layer computes into when it keeps the result
// rounded to bf16 (precision.h's activation_dtype()): one per thread,
// shared by all layers and filled a block of rows at a time, so a model
// holds one block's worth of f32 for these products. A Tensor, so the tensor byte
// counters (tensor.h) see it.
#pragma once

#include <algorithm>
#include <cstdint>

#include "braid/tensor.h"

namespace braid::nn {

// Products kept in bf16 are computed a block of rows at a time, at most
// this many elements (4 MiB of f32), so the scratch stays small whatever
// the layer's width and the batch. Not smaller: each block is a GEMM
// call, and the bf16 GEMM prepares its whole weight operand per call; at
// d_model 1024 blocks of 256 rows (fc1) ran the bf16 step 4% faster than
// blocks of 64 (2^18 elements), and 2^21 gained nothing more.
constexpr int64_t kWideScratchElems = int64_t(1) << 20;

// Rows per block: kWideScratchElems / cols (at least one row).
inline int64_t row_block_rows(int64_t cols) {
  return std::max<int64_t>(1, kWideScratchElems / std::max<int64_t>(1, cols));
}

// Runs f(first row, row count) over [0, rows) in blocks of row_block_rows.
template <class F>
void in_row_blocks(int64_t rows, int64_t cols, const F& f) {
  const int64_t step = row_block_rows(cols);
  for (int64_t r0 = 0; r0 < rows; r0 += step) f(r0, std::min(step, rows - r0));
}

// How many blocks in_row_blocks(rows, cols, ...) makes.
inline int64_t row_block_count(int64_t rows, int64_t cols) {
  const int64_t step = row_block_rows(cols);
  return (rows + step - 1) / step;
}

// The buffer resized to `shape` (f32, contents unspecified); valid until
// the next call on this thread.
float* wide_scratch(const Shape& shape);

// Rounds `wide` (f32, shape's numel, packed) into kept, resized to
// `shape` as bf16.
void keep_rounded(const float* wide, const Shape& shape, Tensor& kept);

}  // namespace braid::nn
