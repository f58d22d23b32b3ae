// PipelineExecutor's per-chunk state, shared by its setup
// (executor_setup.cc) and its step (executor.cc).
#pragma once

#include <string>
#include <vector>

#include "braid/pipeline_executor.h"
#include "parallel/pp/activation_slots.h"

namespace braid::parallel {

struct PipelineExecutor::Stage {
  Stage(int c, int s, std::string what, std::vector<int> backward_at)
      : chunk(c), stage(s), slots(std::move(what), std::move(backward_at)) {}
  int chunk = 0, stage = 0;
  Shape in_shape, out_shape;  // one micro-batch's
  DType in_dtype = DType::kF32;
  std::vector<Tensor> in, act_out, grad_in, grad_out;  // [micro-batch]
  pp_detail::ActivationSlots slots;
  int last_backward = -1;  // the micro-batch whose backward is the chunk's last
};

}  // namespace braid::parallel
