// The job this process was started in: who am I in it, and where is its
// store? Communicator::from_env (comm.h) is built on these; a program that
// needs the job's layout before (or without) a communicator calls them.
//
// launched_job() reads the environment alone and connects to nothing.
// bootstrap_from_env() reads the environment left by whatever started this
// process and returns this rank's place in the job plus a connected Store.
// Sources, first match wins:
//
//  "braid"    braid run:  BRAID_RANK, BRAID_WORLD_SIZE, BRAID_LOCAL_RANK,
//             BRAID_LOCAL_WORLD_SIZE, BRAID_NODE_RANK, BRAID_STORE=host:port,
//             BRAID_SECRET. The launcher hosts the store; ranks only connect
//             (set BRAID_HOST_STORE=1 to make rank 0 host it instead, for jobs
//             started by hand).
//  "torchrun" RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK,
//             MASTER_ADDR, MASTER_PORT. torchrun serves its own store on
//             MASTER_PORT, so rank 0 hosts braid's store on MASTER_PORT+1
//             (or on BRAID_STORE's port when that is set).
//  "mpirun"   Open MPI: OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE.
//             Store: BRAID_STORE, else MASTER_ADDR:MASTER_PORT (rank 0 hosts
//             either); else, when every rank is on one host, a FileStore in
//             /tmp named after the job id (OMPI_MCA_ess_base_jobid,
//             PMIX_NAMESPACE, ...) and the local daemon's pid.
//  "slurm"    srun: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID,
//             SLURM_TASKS_PER_NODE. Store: BRAID_STORE, else
//             MASTER_ADDR:MASTER_PORT, else the first host of
//             SLURM_STEP_NODELIST / SLURM_NODELIST on port
//             BRAID_STORE_PORT or 20000 + SLURM_JOB_ID % 20000; rank 0 hosts.
//  "single"   none of the above: rank 0 of 1 with an in-process store.
//
// The secret is BRAID_SECRET. Without it, torchrun/mpirun/srun jobs use a
// secret derived from values every rank can see (job id, store address) and
// log a warning: such a job is not protected against other local users.
//
// Throws Error(kInvalidArgument) naming the variable for bad values
// (WORLD_SIZE=0, RANK >= WORLD_SIZE, non-numeric, bad host:port),
// Error(kTimeout) if the store cannot be reached within `timeout`,
// Error(kAuth) if the store rejects the secret.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "braid/store.h"

namespace braid {

// Which launcher started this process ("braid", "torchrun", "mpirun",
// "slurm" or "single", by the rules above, first match wins) and this
// process's place in the job. Throws Error(kInvalidArgument) naming the
// variable, as bootstrap_from_env does, for a layout that does not hold.
struct LaunchedJob {
  std::string launcher;
  int rank = 0, size = 1;
};
LaunchedJob launched_job();

struct JobEnv {
  int rank = 0, size = 1, local_rank = 0, local_size = 1, node_rank = 0;
  std::shared_ptr<Store> store;
  std::string secret;
  // Set when this process hosts the store: keep the JobEnv (or this pointer)
  // alive until every rank is done with the store.
  std::shared_ptr<TcpStoreServer> server;
  std::string source;  // launched_job().launcher
};

// Reads the environment and connects to (or hosts) the store. `timeout`
// bounds connecting and becomes the store's timeout.
JobEnv bootstrap_from_env(std::chrono::milliseconds timeout);

}  // namespace braid
