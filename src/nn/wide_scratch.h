// Internal: the f32 buffer a layer computes into when it keeps the result
// rounded to bf16 (precision.h's activation_dtype()): one per thread,
// shared by all layers, so a model holds one layer's worth of f32 for
// these products rather than one per layer. A Tensor, so the tensor byte
// counters (tensor.h) see it.
#pragma once

#include "braid/tensor.h"

namespace braid::nn {

// The buffer resized to `shape` (f32, contents unspecified); valid until
// the next call on this thread.
float* wide_scratch(const Shape& shape);

// Rounds `wide` (f32, shape's numel, packed) into kept, resized to
// `shape` as bf16.
void keep_rounded(const float* wide, const Shape& shape, Tensor& kept);

}  // namespace braid::nn
