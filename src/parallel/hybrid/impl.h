// HybridGpt's state, shared by its step (hybrid_gpt.cc), its checkpoints
// (hybrid_checkpoint.cc) and its ZeRO-1 optimizer (zero1.cc).
#pragma once

#include <memory>
#include <vector>

#include "braid/hybrid.h"
#include "parallel/hybrid/zero1.h"

namespace braid::parallel {

struct HybridGpt::Impl {
  nn::GptConfig cfg;
  uint64_t seed = 0;
  HybridOptions opts;
  std::unique_ptr<tp::TpGpt> model;
  std::unique_ptr<PipelineExecutor> exec;
  std::vector<nn::Parameter*> params;
  std::unique_ptr<Zero1> zero1;  // HybridOptions::zero == 1
  Tensor flat, partial;  // gradient reduction scratch
  // Communication time spent inside the executor's reduce-gradients and
  // optimizer-step actions during the current step.
  double reduce_comm_s = 0, step_comm_s = 0;
};

}  // namespace braid::parallel
