// Bootstrap under Slurm's srun: the rank layout from SLURM_* (tasks per
// node in SLURM_TASKS_PER_NODE's compressed form), and a store at
// BRAID_STORE, MASTER_ADDR:MASTER_PORT or the step's first node.
#include <utility>

#include "braid/env.h"
#include "braid/error.h"
#include "comm/setup/bootstrap_env.h"

namespace braid::comm {
namespace boot {
namespace {

// Entries of SLURM_TASKS_PER_NODE ("2(x3),1") expanded per node.
int slurm_tasks_on_node(const std::string& spec, int node) {
  int idx = 0;
  size_t i = 0;
  while (i < spec.size()) {
    size_t end = spec.find(',', i);
    if (end == std::string::npos) end = spec.size();
    std::string item = spec.substr(i, end - i);
    int count = 0, reps = 1;
    size_t paren = item.find('(');
    try {
      count = std::stoi(item.substr(0, paren));
      if (paren != std::string::npos) reps = std::stoi(item.substr(paren + 2));
    } catch (const std::exception&) {
      bad("SLURM_TASKS_PER_NODE='" + spec + "' is not understood");
    }
    if (node < idx + reps) return count;
    idx += reps;
    i = end + 1;
  }
  bad("SLURM_TASKS_PER_NODE='" + spec + "' has no entry for node " + std::to_string(node));
}

}  // namespace

LayoutVars slurm_vars() {
  return {"SLURM_PROCID", has("SLURM_NTASKS") ? "SLURM_NTASKS" : "SLURM_NPROCS", "SLURM_LOCALID",
          "SLURM_TASKS_PER_NODE"};
}

JobEnv from_slurm(std::chrono::milliseconds timeout) {
  const LayoutVars V = slurm_vars();
  Layout L = need_rank_size(V);
  L.local_rank = opt_int(V.local_rank, 0);
  L.node_rank = opt_int("SLURM_NODEID", 0);
  if (auto tpn = env_str("SLURM_STEP_TASKS_PER_NODE"); tpn || env_str("SLURM_TASKS_PER_NODE"))
    L.local_size = slurm_tasks_on_node(tpn ? *tpn : *env_str("SLURM_TASKS_PER_NODE"), L.node_rank);
  else
    L.local_size = opt_int("SLURM_NTASKS_PER_NODE", 1);
  validate(L, V);
  JobEnv env = with_layout("slurm", L);
  std::string job = env_str("SLURM_JOB_ID").value_or(env_str("SLURM_JOBID").value_or(""));
  std::string step = env_str("SLURM_STEP_ID").value_or(env_str("SLURM_STEPID").value_or(""));
  auto addr = store_from_braid_var();
  if (!addr) addr = store_from_master_vars(0);
  if (!addr && L.size > 1) {
    auto nodes = env_str("SLURM_STEP_NODELIST");
    if (!nodes) nodes = env_str("SLURM_JOB_NODELIST");
    if (!nodes) nodes = env_str("SLURM_NODELIST");
    if (!nodes) bad("srun job without SLURM_NODELIST: set BRAID_STORE=host:port");
    int port = 0;
    if (has("BRAID_STORE_PORT")) {
      port = need_int("BRAID_STORE_PORT");
      if (port < 1 || port > 65535) bad("BRAID_STORE_PORT=" + std::to_string(port) + " is not a port");
    } else {
      int64_t id = 0;
      try {
        id = std::stoll(job);
      } catch (const std::exception&) {
        bad("SLURM_JOB_ID='" + job + "' is not a number: set BRAID_STORE_PORT or BRAID_STORE");
      }
      port = 20000 + int(id % 20000);
    }
    addr = std::make_pair(first_slurm_host(*nodes), port);
  }
  if (!addr) {
    return use_memory_store(std::move(env), timeout);
  }
  attach_foreign(env, job + "." + step, *addr, timeout);
  return env;
}

}  // namespace boot

std::string first_slurm_host(const std::string& nodelist) {
  // The first entry ends at a comma outside brackets.
  int depth = 0;
  size_t end = nodelist.size();
  for (size_t i = 0; i < nodelist.size(); ++i) {
    if (nodelist[i] == '[') ++depth;
    if (nodelist[i] == ']') --depth;
    if (nodelist[i] == ',' && depth == 0) {
      end = i;
      break;
    }
  }
  std::string first = nodelist.substr(0, end);
  size_t open = first.find('[');
  if (open == std::string::npos) return first;
  // "prefix[01-04,07]suffix": the first number of the first range.
  size_t close = first.find(']', open);
  if (close == std::string::npos) boot::bad("SLURM_NODELIST='" + nodelist + "' is not understood");
  std::string inside = first.substr(open + 1, close - open - 1);
  size_t stop = inside.find_first_of(",-");
  return first.substr(0, open) + inside.substr(0, stop) + first.substr(close + 1);
}

}  // namespace braid::comm
