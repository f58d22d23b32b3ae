// The table of every BRAID_* setting (include/braid/settings.h).
#include "braid/settings.h"

#include <iterator>

namespace braid {
namespace {

using K = Setting::Kind;

// Kept in name order; the README's table lists the kUser entries. Constant
// data, initialised before any code runs: static initialisers of other files
// may read settings (env_str) before this file's dynamic initialisers would.
constexpr Setting kSettings[] = {
    {"BRAID_ALGO", K::kUser, "the cost model chooses",
     "force algorithms, e.g. `all_reduce:ring,broadcast:tree` (names: the README's algorithm "
     "table, `braid bench --list-algos`); an unknown name is an error listing the valid ones",
     "src/comm/algo/select.cc"},
    {"BRAID_BIN", K::kTest, "set by CMake for the tests", "path of the built braid tool",
     "tests/"},
    {"BRAID_CHAIN_SLOTS", K::kUser, "max(16, 2 × ranks)",
     "number of the slots the chain all-reduce folds through (one segment per communicator, made "
     "on its first use); rank 0's value applies",
     "src/comm/algo/chain_segment.cc"},
    {"BRAID_CHAIN_SLOT_BYTES", K::kUser, "512 KiB",
     "size of each chain all-reduce slot, rounded to whole pages; rank 0's value applies",
     "src/comm/algo/chain_segment.cc"},
    {"BRAID_CHUNK_BYTES", K::kUser, "1 MiB", "pipelining chunk of the ring and chain algorithms",
     "src/comm/engine/comm_impl.cc"},
    {"BRAID_DETERMINISTIC", K::kUser, "0",
     "`1`: reductions fold in rank order, bitwise reproducible (wins over BRAID_ALGO for "
     "reductions, with a warning)",
     "src/comm/algo/select.cc"},
    {"BRAID_DP_KILL", K::kTest, "unset",
     "`rank:step`: that rank of data-parallel training exits at that step (fault tests; "
     "once: not after a restart)",
     "src/parallel/dp/data_parallel.cc"},
    {"BRAID_FASHION_MNIST_DIR", K::kUser, "Debian's dataset-fashion-mnist directory",
     "directory holding the Fashion-MNIST idx files for `braid train mlp`", "src/nn/fashion_mnist.cc"},
    {"BRAID_HOSTNAME", K::kUser, "the host name",
     "override the host name (pretend hosts in tests)", "src/core/env.cc"},
    {"BRAID_HOST_ID", K::kUser, "host name + boot id + IPC and PID namespaces",
     "override the identity that decides which ranks share memory (fake hosts on one machine)",
     "src/comm/transport/peer_info.cc"},
    {"BRAID_HOST_STORE", K::kLauncher, "unset",
     "`1` on the node whose rank 0 hosts the store at BRAID_STORE (braid run --nnodes)",
     "src/comm/setup/bootstrap.cc"},
    {"BRAID_LOCAL_RANK", K::kLauncher, "BRAID_RANK", "this rank's place on its node",
     "src/comm/setup/bootstrap_env.h"},
    {"BRAID_LOCAL_WORLD_SIZE", K::kLauncher, "BRAID_WORLD_SIZE", "ranks on this node",
     "src/comm/setup/bootstrap_env.h"},
    {"BRAID_LOG_LEVEL", K::kUser, "warn", "`debug`, `info`, `warn`, `error`", "src/core/log.cc"},
    {"BRAID_NNODES", K::kLauncher, "1", "nodes in the job", "src/launch/launcher.cc"},
    {"BRAID_NODE_RANK", K::kLauncher, "0", "this node's index", "src/comm/setup/bootstrap.cc"},
    {"BRAID_NO_HIER", K::kUser, "0",
     "`1`: no hierarchical (per-host, then across hosts) all-reduce when ranks span hosts",
     "src/comm/engine/comm_impl.cc"},
    {"BRAID_PROBE", K::kUser, "1",
     "`0`: never probe the links at communicator creation (without a cache, the built-in figures)",
     "src/comm/setup/probe.cc"},
    {"BRAID_RESTART_COUNT", K::kLauncher, "0",
     "which restart of the job this is (braid run --max-restarts); `braid train --checkpoint` "
     "resumes from its checkpoint when above 0, and the fault hooks fire in run 0 only",
     "tools/braid/train_report.h"},
    {"BRAID_RANK", K::kLauncher, "unset", "this rank (set by braid run for each rank it starts)",
     "src/comm/setup/bootstrap_env.h"},
    {"BRAID_RUN_TEST_CHILD", K::kTest, "unset",
     "marks a process the launcher test starts as its child program", "tests/launch/run_test.cc"},
    {"BRAID_SECRET", K::kUser, "made per job by the launcher",
     "job secret every connection proves (export the same one on every node)",
     "src/comm/setup/bootstrap_env.cc"},
    {"BRAID_SHM_CMA_BYTES", K::kUser, "0 (off)",
     "opt-in single-copy (`process_vm_readv`) shared-memory path for messages of at least this "
     "many bytes (slower than the slot ring on the project's VM, see bench/results/)",
     "src/comm/transport/shm/shm_wire_cma.cc"},
    {"BRAID_SHM_LIGHT_PUBLISH", K::kUser, "1",
     "`0`: shared-memory messages are published with full fences (seq_cst stores) instead of "
     "plain stores plus a 5 µs re-check by a rank about to sleep (see docs/COMM.md)",
     "src/comm/transport/shm/shm_wire_setup.cc"},
    {"BRAID_SHM_SLOTS", K::kUser, "up to 8 (a rank's segment stays under 32 MiB)",
     "number of slots in each shared-memory ring", "src/comm/transport/shm/shm_wire_setup.cc"},
    {"BRAID_SHM_SLOT_BYTES", K::kUser, "512 KiB", "size of each shared-memory ring slot",
     "src/comm/transport/shm/shm_wire_setup.cc"},
    {"BRAID_SHM_STREAM_BYTES", K::kUser, "65536 (0: off)",
     "shared-memory slot copies of at least this many bytes use streaming stores, so the reading "
     "core takes them from memory rather than from the writer's cache",
     "src/comm/transport/shm/shm_wire_setup.cc"},
    {"BRAID_SOURCE_DIR", K::kTest, "unset: the tests find it from their own path",
     "the source tree (fixtures, README), for tests run from elsewhere",
     "tests/"},
    {"BRAID_SPIN_US", K::kUser, "200 µs; 2 µs when the host has more ranks than cores",
     "how long a waiting rank spins before it sleeps (with more ranks than cores, shared-memory "
     "waits do not spin but yield, BRAID_YIELD_US)",
     "src/comm/transport/wait_plan.cc"},
    {"BRAID_STORE", K::kUser, "set by braid run; else MASTER_ADDR:MASTER_PORT",
     "`host:port` of the job's store (rank 0 hosts it under mpirun, torchrun or srun)",
     "src/comm/setup/bootstrap_env.cc"},
    {"BRAID_STORE_PORT", K::kUser, "derived from the Slurm job id",
     "port of the store rank 0 hosts under srun", "src/comm/setup/bootstrap_slurm.cc"},
    {"BRAID_STREAM_OUT_BYTES", K::kUser, "16777216 (0: off)",
     "a call whose output on this rank is at least this many bytes writes the blocks it does not "
     "read again (all_to_all, gather, scatter, all_gather, the ring all_reduce's last step) with "
     "streaming stores instead of through the cache",
     "src/comm/transport/shm/stream_copy.cc"},
    {"BRAID_STRESS_OPS", K::kTest, "240", "operations per stream of the stress test",
     "tests/comm/stress_test.cc"},
    {"BRAID_STRESS_SEED", K::kTest, "1", "seed of the stress test's streams",
     "tests/comm/stress_test.cc"},
    {"BRAID_TCP_ADDR", K::kUser, "the address the host name resolves to",
     "the address this rank's TCP transport listens on and announces", "src/comm/transport/tcp/tcp_connect.cc"},
    {"BRAID_TCP_BUF_BYTES", K::kUser, "0 (the kernel's autotuning)",
     "SO_SNDBUF / SO_RCVBUF of each TCP connection", "src/comm/transport/tcp/tcp_wire_setup.cc"},
    {"BRAID_TCP_RXBUF_BYTES", K::kUser, "256 KiB",
     "staging buffer a TCP connection reads small messages and reductions through",
     "src/comm/transport/tcp/tcp_wire_setup.cc"},
    {"BRAID_TCP_STREAMS", K::kUser, "1",
     "TCP connections per pair of ranks; messages of 256 KiB and up are striped over them (at "
     "most 16; the same on every rank)",
     "src/comm/transport/tcp/tcp_wire_setup.cc"},
    {"BRAID_TENSOR_CACHE", K::kUser, "1",
     "`0`: freed tensor buffers go straight back to the C library (and large ones to the "
     "kernel) instead of being kept for the next tensor of their size (braid/tensor.h)",
     "src/tensor/tensor.cc"},
    {"BRAID_TEST_HOSTS_REQUIRED", K::kTest, "unset",
     "`1`: tests that need test hosts (network namespaces) fail where they cannot be made, "
     "instead of skipping (CI sets it)",
     "tests/support/test_hosts.cc"},
    {"BRAID_TIMEOUT", K::kUser, "300", "seconds before any blocking operation fails",
     "src/core/env.cc"},
    {"BRAID_TOPOLOGY", K::kUser, "ranks of one host next to each other",
     "JSON link-bandwidth matrix; rings follow its fastest cycle", "src/comm/engine/comm_setup.cc"},
    {"BRAID_TORCH_INLINE", K::kUser, "1 when the host's ranks' compute threads take every core",
     "braid_torch: `1` runs a group's collectives on the thread that issues them (an async call "
     "returns a finished work), `0` on braid's background thread, overlapping the caller's work",
     "python/braid_torch/threads.cc"},
    {"BRAID_TRANSPORT", K::kUser, "auto", "`auto` (shm inside a host, tcp between), `shm`, `tcp`",
     "src/comm/engine/comm_impl.cc"},
    {"BRAID_TUNING", K::kUser, "the cache at ~/.cache/braid/tuning.json",
     "α-β tuning file to use as it is (the default cache is filled by a job's first communicator "
     "probing the links it lacks figures for, and refreshed by `braid bench --probe`)",
     "src/comm/algo/select.cc"},
    {"BRAID_WORLD_SIZE", K::kLauncher, "unset", "ranks in the job", "src/comm/setup/bootstrap_env.h"},
    {"BRAID_YIELD_US", K::kUser, "200 µs when the host has more ranks than cores, else 0",
     "how long a shared-memory wait polls between sched_yield() calls before it sleeps",
     "src/comm/transport/wait_plan.cc"},
};

}  // namespace

const std::vector<Setting>& all_settings() {
  static const std::vector<Setting> all(std::begin(kSettings), std::end(kSettings));
  return all;
}

const Setting* find_setting(const std::string& name) {
  for (const Setting& s : kSettings)
    if (name == s.name) return &s;
  return nullptr;
}

const char* setting_kind_name(Setting::Kind k) {
  switch (k) {
    case K::kUser: return "user";
    case K::kLauncher: return "launcher";
    case K::kTest: return "test";
  }
  return "?";
}

}  // namespace braid
