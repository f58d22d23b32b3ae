// Internal: moving blocks between the "rank-major" layout a collective
// uses ([n][outer][inner]: rank r's block contiguous) and a tensor's own
// layout ([outer][n][inner]: the blocks interleaved along a dimension).
// A split along the last dim of [rows, C] is outer = rows, inner = C/n; a
// split along T of [B, T, C] is outer = B, inner = (T/n)·C.
#pragma once

#include <cstdint>
#include <string>

#include "braid/tensor.h"

namespace braid::parallel::tp {

// dst[o][r][i] = src[r][o][i]
void blocks_to_interleaved(const float* src, float* dst, int64_t n, int64_t outer,
                           int64_t inner);
// dst[r][o][i] = src[o][r][i]
void interleaved_to_blocks(const float* src, float* dst, int64_t n, int64_t outer,
                           int64_t inner);
// dst[o][i] = src[o][r][i]: rank r's block alone.
void take_block(const float* src, float* dst, int64_t n, int64_t r, int64_t outer, int64_t inner);

// Elements per sample (dim 0) of x.
inline int64_t per_sample(const Tensor& x) {
  return x.ndim() && x.dim(0) ? x.numel() / x.dim(0) : 0;
}

// The sequence split of a [B, T, ...] activation: outer = B, inner = the
// elements of T/n positions. Throws naming T when n does not divide it.
struct SeqSplit {
  int64_t outer, inner;
};
SeqSplit seq_split(const Tensor& x, int64_t n, const std::string& what, bool gathered);

}  // namespace braid::parallel::tp
