// Bootstrap from the environment of braid run or torchrun, and the choice
// among the launchers (mpirun and srun have files of their own).
//
// Why rank 0 hosts the store for the foreign launchers: none of them runs a
// store braid can speak to (torchrun's c10d store has its own protocol), and
// rank 0 is the one process every launcher places predictably (MASTER_ADDR,
// the first host of a Slurm step).
#include "comm/setup/bootstrap.h"

#include <utility>

#include "braid/env.h"
#include "braid/error.h"
#include "braid/log.h"
#include "comm/setup/bootstrap_env.h"

namespace braid::comm {
namespace boot {

JobEnv from_braid(std::chrono::milliseconds timeout) {
  const LayoutVars V = kBraidVars;
  Layout L = need_rank_size(V);
  L.local_rank = opt_int(V.local_rank, L.rank);
  L.local_size = opt_int(V.local_size, L.size);
  L.node_rank = opt_int("BRAID_NODE_RANK", 0);
  validate(L, V);
  JobEnv env = with_layout("braid", L);
  auto addr = store_from_braid_var();
  if (!addr) {
    if (L.size > 1) bad("BRAID_STORE is not set (braid run sets it; expected host:port)");
    return use_memory_store(std::move(env), timeout);
  }
  auto secret = env_str("BRAID_SECRET");
  if (!secret) bad("BRAID_SECRET is not set (braid run sets it together with BRAID_STORE)");
  env.secret = *secret;
  attach_tcp(env, addr->first, addr->second, L.rank == 0 && env_flag("BRAID_HOST_STORE"), timeout);
  return env;
}

JobEnv from_torchrun(std::chrono::milliseconds timeout) {
  const LayoutVars V = kTorchrunVars;
  Layout L = need_rank_size(V);
  L.local_rank = opt_int(V.local_rank, 0);
  L.local_size = opt_int(V.local_size, has(V.local_rank) ? L.size : 1);
  validate(L, V);
  L.node_rank = opt_int("GROUP_RANK", L.rank / L.local_size);
  JobEnv env = with_layout("torchrun", L);
  auto addr = store_from_braid_var();
  if (!addr) addr = store_from_master_vars(1);
  if (!addr) {
    if (L.size > 1) bad("RANK/WORLD_SIZE are set but MASTER_ADDR/MASTER_PORT (or BRAID_STORE) are not");
    return use_memory_store(std::move(env), timeout);
  }
  attach_foreign(env, env_str("TORCHELASTIC_RUN_ID").value_or(""), *addr, timeout);
  return env;
}

// The launcher whose variables are set, first match wins: the variables
// that hold the rank and world size under it, and its reader (none for
// "single").
struct Launcher {
  const char* name;
  LayoutVars vars;
  JobEnv (*read)(std::chrono::milliseconds);
};
Launcher launcher_from_env() {
  if (has(kBraidVars.rank)) return {"braid", kBraidVars, from_braid};
  if (has(kTorchrunVars.rank) && has(kTorchrunVars.size))
    return {"torchrun", kTorchrunVars, from_torchrun};
  if (has(kMpirunVars.rank)) return {"mpirun", kMpirunVars, from_mpirun};
  if (has("SLURM_PROCID") && (has("SLURM_NTASKS") || has("SLURM_NPROCS")))
    return {"slurm", slurm_vars(), from_slurm};
  return {"single", {nullptr, nullptr, nullptr, nullptr}, nullptr};
}

}  // namespace boot
}  // namespace braid::comm

namespace braid {

using namespace comm::boot;

LaunchedJob launched_job() {
  const Launcher l = launcher_from_env();
  LaunchedJob job;
  job.launcher = l.name;
  if (l.vars.rank) {
    comm::boot::Layout L = need_rank_size(l.vars);
    L.local_size = 1;  // only rank and size are read here; the local pair is bootstrap's
    validate(L, l.vars);
    job.rank = L.rank;
    job.size = L.size;
  }
  return job;
}

JobEnv bootstrap_from_env(std::chrono::milliseconds timeout) {
  JobEnv env;
  const Launcher l = launcher_from_env();
  if (l.read)
    env = l.read(timeout);
  else {
    JobEnv single;
    single.source = "single";
    env = use_memory_store(std::move(single), timeout);
  }
  if (env.size > 1) log_set_rank(env.rank);
  BRAID_LOG(kInfo, "bootstrap (" << env.source << "): rank " << env.rank << " of " << env.size
                                 << ", local " << env.local_rank << " of " << env.local_size
                                 << ", node " << env.node_rank
                                 << (env.server ? ", hosting the store" : ""));
  return env;
}

}  // namespace braid
