// ParallelModel's state, shared by its construction (parallel_model.cc),
// its step (parallel_trainer.cc) and its checkpoints (model_checkpoint.cc).
#pragma once

#include <memory>
#include <vector>

#include "braid/data_parallel.h"
#include "braid/parallelize.h"

namespace braid::parallel {

struct ParallelModel::Impl {
  std::shared_ptr<const ModelSpec> spec;
  ParallelOptions opts;
  std::vector<size_t> bounds;  // the virtual stages' unit bounds
  std::unique_ptr<ShardedModel> model;
  // Over the mesh's dp group: the stage's gradient buckets (every
  // parameter's data and grad are views into them) and the ZeRO stage.
  // Built before the executor, whose slot copies view those buffers.
  std::unique_ptr<DataParallel> dp;
  std::unique_ptr<PipelineExecutor> exec;
  std::vector<nn::Parameter*> params;
  Tensor partial;  // sequence-parallel gradient reduction scratch
};

}  // namespace braid::parallel
