// parallel expert parallelism — the groups an MoE model (moe.h) is laid out
// over inside a mesh's data-parallel group, as DeepSpeed-MoE and Megatron
// lay it out (ep ⊆ dp):
//   * an expert-parallel (ep) group is `ep` consecutive dp ranks
//     [g·ep, (g+1)·ep) of one (pp, tp) place: they split the experts of
//     every MoE layer, ep rank r holding experts [r·E/ep, (r+1)·E/ep), and
//     exchange tokens with all_to_all_v;
//   * an expert-data-parallel (edp) group is the dp ranks with the same ep
//     rank, dp/ep of them: the replicas of the same experts, over which the
//     expert gradients are summed (every other parameter is summed over
//     the whole dp group).
// Expert tensors are split along dimension 0 over ep and replicated over
// tp (tp::Sharded::expert).
//
// Collective: make_expert_groups splits the mesh's dp group twice (two
// store rendezvous), so every rank of the world calls it at the same point.
// Errors: Error(kInvalidArgument) when ep < 1 or ep does not divide dp,
// naming both.
#pragma once

#include <memory>

#include "braid/comm.h"
#include "braid/mesh.h"
#include "braid/moe.h"

namespace braid::parallel {

struct ExpertGroups {
  int ep = 1;
  std::shared_ptr<Communicator> ep_comm;   // this rank's ep group
  std::shared_ptr<Communicator> edp_comm;  // this rank's expert-data-parallel group
};

// Throws Error(kInvalidArgument) unless 1 ≤ ep and ep divides dp.
void check_expert_layout(int dp, int ep);

ExpertGroups make_expert_groups(const Mesh& mesh, int ep);

// The layer's exchange over `ep` (its all_to_all and all_to_all_v).
std::shared_ptr<nn::ExpertExchange> expert_exchange(std::shared_ptr<Communicator> ep);

}  // namespace braid::parallel
