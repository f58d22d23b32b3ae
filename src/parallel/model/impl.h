// ParallelModel's state, shared by its construction (parallel_model.cc),
// its step (parallel_trainer.cc) and its checkpoints (model_checkpoint.cc).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "braid/data_parallel.h"
#include "braid/parallelize.h"

namespace braid::parallel {

struct ParallelModel::Impl {
  std::shared_ptr<const ModelSpec> spec;
  ParallelOptions opts;
  bool pipelined = false;  // tp or pp above 1: exec runs the stages
  std::vector<size_t> bounds;  // the virtual stages' unit bounds
  std::unique_ptr<ShardedModel> model;
  // Over the mesh's dp group: the stage's gradient buckets (every
  // parameter's data and grad are views into them) and the ZeRO stage.
  // Built before the executor, whose slot copies view those buffers.
  std::unique_ptr<DataParallel> dp;
  std::unique_ptr<PipelineExecutor> exec;  // null unless pipelined
  std::vector<nn::Parameter*> params;
  Tensor partial;  // sequence-parallel gradient reduction scratch
  ExpertGroups experts;  // ep > 1: the ep and expert-data-parallel groups
  std::shared_ptr<nn::ExpertExchange> exchange;  // over experts.ep_comm
};

// --init-from: every shard takes its tp rank's slice of the file's full
// "model/<name>" tensor (model_checkpoint.cc).
// Expert tensors then keep `ep`'s block of dimension 0 (null: all of it).
void load_model_slices(const std::string& path, const std::vector<tp::Sharded>& shards, int rank,
                       int size, const nn::ExpertExchange* ep = nullptr);

}  // namespace braid::parallel
