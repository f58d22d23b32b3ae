// One gradient bucket of DataParallel: a flat gradient (and parameter)
// buffer, its shard geometry and the state of its reduction. Private to
// src/parallel/dp.
#pragma once

#include <vector>

#include "braid/comm.h"
#include "braid/module.h"

namespace braid::parallel::dp {

struct Bucket {
  size_t index = 0;
  // Expert parameters (DpOptions::expert_param): reduced over comm (the
  // expert-data-parallel group) instead of the DataParallel's group.
  bool expert = false;
  Communicator* comm = nullptr;
  std::vector<nn::Parameter*> params;  // grad-ready order
  std::vector<Shape> shapes;
  std::vector<int64_t> offsets;        // of each parameter in the flat buffer
  int64_t numel = 0, padded = 0, shard = 0;
  size_t ready = 0;
  bool launched = false, reduced = false, summed = false;
  Work reduce_work, gather_work, gather16_work;
  bool gather_pending = false;
  bool params_live = true, grads_live = true;
  // full [padded]: replicated gradients always; sharded ones while backward needs them
  Tensor grad;
  SharedBuffer grad_mem;  // behind `grad` with DpOptions::shared_buckets
  CountedStorage grad_mem_counted;  // grad_mem in the tensor storage figures
  Tensor param;        // full [padded]: replicated parameters always; sharded while gathered
  Tensor param_shard;  // sharded parameters: this rank's chunk (owned)
  Tensor grad_shard;   // sharded gradients: this rank's reduced chunk (owned)
  Tensor send16, recv16;  // bf16 staging
  // Pieces of this rank's chunk: parameter i of the bucket, elements
  // [begin, begin + count) of it, at position `at` of the chunk.
  struct Slice {
    size_t i;
    int64_t begin, count, at;
  };
  std::vector<Slice> slices;

  float* shard_params_ptr(int rank) {
    return param_shard.empty() ? param.f32() + int64_t(rank) * shard : param_shard.f32();
  }
  float* shard_grads_ptr(int rank) {
    return grad_shard.empty() ? grad.f32() + int64_t(rank) * shard : grad_shard.f32();
  }
  // Every parameter's data / grad becomes a view into `param` / `grad`.
  void point_params() {
    for (size_t i = 0; i < params.size(); ++i)
      params[i]->data = Tensor::view(param.f32() + offsets[i], shapes[i]);
  }
  void point_grads() {
    for (size_t i = 0; i < params.size(); ++i)
      params[i]->grad = Tensor::view(grad.f32() + offsets[i], shapes[i]);
  }
  // The step starts: no gradient is ready, nothing is in flight.
  void reset() {
    ready = 0;
    launched = reduced = summed = false;
  }
};

}  // namespace braid::parallel::dp
