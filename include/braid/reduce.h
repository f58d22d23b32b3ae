// Vectorised reduction kernels: every dtype × every reduce op.
//
// Kernels are dispatched at run time to the widest vector ISA the CPU has
// (AVX-512, AVX2, or plain SSE2). f16 and bf16 are computed in f32 and
// rounded once per call; reduce_many accumulates all sources in f32 before
// rounding, which is what "f16/bf16 accumulate in f32" means for braid.
// avg is computed as sum here; callers divide with scale_avg once at the end.
#pragma once

#include <cstddef>

#include "braid/dtype.h"

namespace braid {

// dst[i] = a[i] op b[i]. dst may alias a or b. Throws Error(kInvalidArgument)
// for unsupported pairs (bitwise ops on floats).
void reduce2(void* dst, const void* a, const void* b, size_t count, DType t, ReduceOp op);

// dst[i] = ((src[0][i] op src[1][i]) op src[2][i]) ... — a left fold in the
// order given, accumulating in f32 (f64 for f64). dst may alias any source.
void reduce_many(void* dst, const void* const* srcs, int nsrc, size_t count, DType t,
                 ReduceOp op);

// buf[i] /= divisor (integer types: truncating division). Used to finish avg.
void scale_avg(void* buf, size_t count, DType t, int divisor);

// The identity element of op for t, written into one element at `out`.
void reduce_identity(void* out, DType t, ReduceOp op);

}  // namespace braid
