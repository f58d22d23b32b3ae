// What the launcher-specific bootstraps (bootstrap.cc, bootstrap_mpirun.cc,
// bootstrap_slurm.cc) share: reading the environment's integers, the job
// secret, the rank layout's checks, and reaching the store. Private to
// src/comm/setup.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <utility>

#include "comm/setup/bootstrap.h"

namespace braid::comm::boot {

[[noreturn]] void bad(const std::string& what);  // Error(kInvalidArgument)
bool has(const char* name);                      // the variable is set
// An integer variable that must be present, in [0, 2^30].
int need_int(const char* name);
int opt_int(const char* name, int fallback);

std::string sha256_hex(const std::string& s);
// BRAID_SECRET, or a secret every rank derives alike from `shared` (rank 0
// says so, once for the job).
std::string secret_for(const std::string& source, const std::string& shared, int rank);

struct Layout {
  int rank = 0, size = 1, local_rank = 0, local_size = 1, node_rank = 0;
};
// The variables a launcher gives the layout in (the names its errors use).
struct LayoutVars {
  const char *rank, *size, *local_rank, *local_size;
};
// Each launcher's layout variables (the first two decide which launcher
// started the process: bootstrap.cc's launcher_from_env).
constexpr LayoutVars kBraidVars{"BRAID_RANK", "BRAID_WORLD_SIZE", "BRAID_LOCAL_RANK",
                                "BRAID_LOCAL_WORLD_SIZE"};
constexpr LayoutVars kTorchrunVars{"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"};
constexpr LayoutVars kMpirunVars{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                 "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"};
// The size is in SLURM_NTASKS, or in older Slurm SLURM_NPROCS.
LayoutVars slurm_vars();
// rank and size from their variables, which must be set.
Layout need_rank_size(const LayoutVars& v);
// Throws naming the variable whose value breaks the layout.
void validate(const Layout& L, const LayoutVars& v);
// The job environment of `source` with layout L.
JobEnv with_layout(const char* source, const Layout& L);

// Connects to host:port; rank 0 (when `host_it`) first starts the server
// there, listening on every interface.
void attach_tcp(JobEnv& env, const std::string& host, int port, bool host_it,
                std::chrono::milliseconds timeout);
// Under a launcher other than braid run: rank 0 hosts the store at `addr`,
// and the secret is BRAID_SECRET or derived from the job's id and `addr`.
void attach_foreign(JobEnv& env, const std::string& job_id, const std::pair<std::string, int>& addr,
                    std::chrono::milliseconds timeout);
// A job that names no store (one rank): an in-process store, and
// BRAID_SECRET or a fresh secret.
JobEnv use_memory_store(JobEnv env, std::chrono::milliseconds timeout);
// MASTER_ADDR:MASTER_PORT+offset, when set.
std::optional<std::pair<std::string, int>> store_from_master_vars(int port_offset);
// BRAID_STORE, when set.
std::optional<std::pair<std::string, int>> store_from_braid_var();

JobEnv from_braid(std::chrono::milliseconds timeout);
JobEnv from_torchrun(std::chrono::milliseconds timeout);
JobEnv from_mpirun(std::chrono::milliseconds timeout);
JobEnv from_slurm(std::chrono::milliseconds timeout);

}  // namespace braid::comm::boot
