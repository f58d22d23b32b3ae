// Which c10d extension point this build of braid_torch implements.
//
// torch 1.x: a third-party backend is a c10d::ProcessGroup subclass, and
// the creator registered with torch.distributed.Backend.register_backend
// returns it as the group itself.
// torch 2.x: the group is torch's own c10d::ProcessGroup, which dispatches
// each call by device to a c10d::Backend; a third-party backend is a
// c10d::Backend subclass, registered for the devices it serves
// (register_backend(..., devices=["cpu"])), and the creator returns it for
// torch to wrap.
//
// Both base classes declare the same virtual collectives braid_torch
// overrides (broadcast ... barrier, _allgather_base, _reduce_scatter_base,
// alltoall_base), with the same signatures, so ProcessGroupBraid derives
// from BackendBase. torch 2.x adds the coalesced forms of the two _base
// collectives (allgather_into_tensor_coalesced,
// reduce_scatter_tensor_coalesced: what dist._coalescing_manager issues for
// all_gather_into_tensor / reduce_scatter_tensor calls inside it), which
// BRAID_TORCH_2 enables. The version comes
// from <torch/version.h>; Debian's torch 1.13 ships none, which means 1.x.
#pragma once

#if __has_include(<torch/version.h>)
#include <torch/version.h>
#endif

#if defined(TORCH_VERSION_MAJOR) && TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#define BRAID_TORCH_C10D_BASE Backend
#define BRAID_TORCH_2 1
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#define BRAID_TORCH_C10D_BASE ProcessGroup
#define BRAID_TORCH_2 0
#endif

#define BRAID_TORCH_STR2(x) #x
#define BRAID_TORCH_STR(x) BRAID_TORCH_STR2(x)

namespace braid_torch {
using BackendBase = c10d::BRAID_TORCH_C10D_BASE;
// The Python name of BackendBase (torch._C._distributed_c10d.<name>).
inline constexpr const char* kBackendBasePyName = BRAID_TORCH_STR(BRAID_TORCH_C10D_BASE);
}  // namespace braid_torch
