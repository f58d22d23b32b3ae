// DataParallel's bucket: one flat gradient (and parameter) buffer, its
// shard geometry and the state of its reduction. Private to src/parallel.
#pragma once

#include <vector>

#include "braid/data_parallel.h"

namespace braid::parallel {

struct DataParallel::Bucket {
  size_t index = 0;
  std::vector<nn::Parameter*> params;  // grad-ready order
  std::vector<Shape> shapes;
  std::vector<int64_t> offsets;        // of each parameter in the flat buffer
  int64_t numel = 0, padded = 0, shard = 0;
  size_t ready = 0;
  bool launched = false, reduced = false, summed = false;
  Work reduce_work, gather_work, gather16_work;
  bool gather_pending = false;
  bool params_live = true, grads_live = true;
  Tensor grad;         // full [padded]: ZeRO 0/1 always; 2/3 while backward needs it
  SharedBuffer grad_mem;  // behind `grad` with DpOptions::shared_buckets
  Tensor param;        // full [padded]: ZeRO 0–2 always; 3 while gathered
  Tensor param_shard;  // ZeRO 3: this rank's chunk (owned)
  Tensor grad_shard;   // ZeRO 2/3: this rank's reduced chunk (owned)
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
};

}  // namespace braid::parallel
