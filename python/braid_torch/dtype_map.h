// How a CPU tensor's dtype and a c10d reduce op reach braid.
//
// Collectives that only move data (broadcast, gathers, scatter, all-to-all,
// send/recv) move raw bytes, so every dtype works there. Reductions need
// braid's arithmetic: float32/64, float16, bfloat16, int8, uint8, int32 and
// int64 map one to one; complex64/128 reduce as pairs of float32/64 under
// SUM and AVG (elementwise on the real and imaginary parts, which is what
// those ops mean for complex numbers); bool reduces as uint8 0/1 with SUM
// and MAX as OR, PRODUCT and MIN as AND (torch's own results on bool);
// anything else is refused with braid::Error(kNotSupported) naming the
// dtype, the op and the collective.
#pragma once

#include <cstddef>
#include <string>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include "braid/dtype.h"

namespace braid_torch {

struct Reduction {
  braid::DType dtype;
  braid::ReduceOp op;
  size_t per_element;  // braid elements per tensor element (2 for complex)
};

Reduction map_reduction(at::ScalarType t, const c10d::ReduceOp& op, const char* collective);

// Throws braid::Error(kInvalidArgument) unless `t` is a dense CPU tensor;
// `what` names the argument ("allreduce tensor", "allgather output 2").
void check_cpu_tensor(const at::Tensor& t, const std::string& what);

}  // namespace braid_torch
