// Bootstrap under Open MPI's mpirun: the rank layout from OMPI_COMM_WORLD_*,
// and a store at BRAID_STORE or MASTER_ADDR:MASTER_PORT, or, for a job on
// one host, a file store named after the job.
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <utility>

#include "braid/env.h"
#include "braid/error.h"
#include "comm/setup/bootstrap_env.h"
#include "comm/transport/peer_info.h"

namespace braid::comm::boot {
namespace {

std::string ompi_job_id() {
  for (const char* v : {"OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_ess_jobid", "PMIX_NAMESPACE",
                        "OMPI_MCA_orte_hnp_uri", "PMIX_ID"})
    if (auto s = env_str(v)) return *s;
  return "";
}

// The parent process as no later process can be: its pid, when it started
// (clock ticks since boot, field 22 of /proc/PID/stat) and on which host
// and boot (host_identity). Open MPI derives the job id from mpirun's pid,
// and pids come round again (after pid_max processes: 32768 on many
// machines): by pid and job id alone, a job would open the directory a
// killed job left, and read its keys.
std::string parent_identity() {
  const std::string ppid = std::to_string(::getppid());
  std::ifstream stat("/proc/" + ppid + "/stat");
  std::string line;
  std::getline(stat, line);
  const size_t name_end = line.rfind(')');  // the command's name may hold spaces
  std::istringstream after(name_end == std::string::npos ? "" : line.substr(name_end + 1));
  std::string start;
  for (int field = 3; field <= 22; ++field) after >> start;
  if (!after)
    bad("mpirun job: cannot read the parent process's start time in /proc/" + ppid +
        "/stat: set BRAID_STORE=host:port");
  return ppid + "|" + start + "|" + host_identity();
}

}  // namespace

JobEnv from_mpirun(std::chrono::milliseconds timeout) {
  const LayoutVars V = kMpirunVars;
  Layout L = need_rank_size(V);
  L.local_rank = opt_int(V.local_rank, 0);
  L.local_size = opt_int(V.local_size, 1);
  validate(L, V);
  L.node_rank = L.rank / L.local_size;  // assumes by-slot (block) placement
  JobEnv env = with_layout("mpirun", L);
  std::string job = ompi_job_id();
  auto addr = store_from_braid_var();
  if (!addr) addr = store_from_master_vars(0);
  if (addr) {
    attach_foreign(env, job, *addr, timeout);
    return env;
  }
  if (L.size == 1) {
    return use_memory_store(std::move(env), timeout);
  }
  if (L.local_size != L.size)
    bad("mpirun job spans several hosts: set BRAID_STORE=host:port (rank 0 hosts the store "
        "there) or MASTER_ADDR and MASTER_PORT");
  if (job.empty())
    bad("mpirun job without a job id (OMPI_MCA_ess_base_jobid / PMIX_NAMESPACE): set "
        "BRAID_STORE=host:port");
  // Every rank of one host shares the local daemon as parent; with the job
  // id, the parent's identity names the job's directory, so a later job
  // never sees stale keys (not even one whose mpirun has the same pid).
  std::string tag = sha256_hex(job + "|" + parent_identity()).substr(0, 24);
  std::string dir = "/tmp/braid_store_" + std::to_string(::getuid()) + "_" + tag;
  env.secret = secret_for("mpirun", job + "|" + dir, L.rank);
  // The last rank of this host to let go of its store removes the directory.
  env.store = make_file_store(dir, L.local_size);
  env.store->set_timeout(timeout);
  return env;
}

}  // namespace braid::comm::boot
