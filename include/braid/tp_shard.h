// How a tensor-parallel parameter is split over its group (ShardSpec), the
// parameter with its split (Sharded), and the moves between a full tensor
// and its shards.
#pragma once

#include <vector>

#include "braid/comm.h"
#include "braid/module.h"
#include "braid/tensor.h"

namespace braid::parallel::tp {

struct ShardSpec {
  int dim = -1;   // dimension of the full tensor split across the group; -1: replicated
  int parts = 1;  // that dimension is `parts` equal blocks, each split (fused q|k|v: 3)
  // Replicated, but each rank's gradient covers only its own positions
  // (sequence parallelism): the gradients must be summed over the group.
  bool partial_grad = false;
};

struct Sharded {
  nn::Parameter* param = nullptr;
  ShardSpec spec;
  Shape full;  // the serial parameter's shape
  // An MoE layer's stacked expert tensor (moe.h): split along dimension 0
  // over the expert-parallel group (expert_parallel.h), replicated over tp
  // (spec is then replicated).
  bool expert = false;
};

// This rank's shard of a full tensor.
Tensor slice_shard(const Tensor& full, const ShardSpec& spec, int rank, int size);
// The full tensor from every rank's shard (collective: one all_gather).
Tensor gather_shards(const Tensor& shard, const ShardSpec& spec, const Shape& full,
                     Communicator& tp);

// Under sequence parallelism, sums over the group the gradients of the
// parameters marked partial_grad: replicated parameters that each rank
// computed from its own positions (layer norms, row-parallel biases, the
// position table). One all_reduce through `scratch`; nothing when there are
// none. Call once per optimizer step, after the last backward (gradients
// accumulate over micro-batches first).
void reduce_partial_grads(const std::vector<Sharded>& params, Communicator& tp, Tensor& scratch);

}  // namespace braid::parallel::tp
