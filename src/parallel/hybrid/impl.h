// HybridGpt's state, shared by its step (hybrid_gpt.cc) and its
// checkpoints (hybrid_checkpoint.cc).
#pragma once

#include <memory>
#include <vector>

#include "braid/data_parallel.h"
#include "braid/hybrid.h"

namespace braid::parallel {

struct HybridGpt::Impl {
  nn::GptConfig cfg;
  uint64_t seed = 0;
  HybridOptions opts;
  std::vector<size_t> bounds;  // the virtual stages' module bounds
  std::unique_ptr<tp::TpGpt> model;
  // Over the mesh's dp group: the stage's gradient buckets (every
  // parameter's data and grad are views into them) and the ZeRO stage.
  // Built before the executor, whose slot copies view those buffers.
  std::unique_ptr<DataParallel> dp;
  std::unique_ptr<PipelineExecutor> exec;
  std::vector<nn::Parameter*> params;
  Tensor partial;  // sequence-parallel gradient reduction scratch
};

}  // namespace braid::parallel
