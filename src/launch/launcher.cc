// launch_local: the job around the ranks — the secret, the store, each
// rank's environment and, multi-node, the link to the other launchers. The
// ranks themselves are started and supervised by launch::Supervisor.
#include "braid/launch.h"

#include <unistd.h>

#include <cstdio>
#include <memory>
#include <optional>

#include "braid/env.h"
#include "braid/error.h"
#include "braid/store.h"
#include "comm/setup/bootstrap.h"
#include "launch/line_prefixer.h"
#include "launch/node_link.h"
#include "launch/spawn.h"
#include "braid/supervisor.h"
#include "braid/survivable.h"

namespace braid {

using namespace launch;

namespace {

bool env_has(const std::vector<std::string>& env, const std::string& name) {
  for (auto& e : env)
    if (e.compare(0, name.size() + 1, name + "=") == 0) return true;
  return false;
}

}  // namespace

bool launched_as_rank() { return env_str("BRAID_RANK").has_value(); }

std::string self_exe() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw_errno("readlink /proc/self/exe");
  return std::string(buf, size_t(n));
}

int launch_local(int n, const std::vector<std::string>& argv, const LaunchOptions& opt) {
  const std::string& tool = opt.tool_name;
  BRAID_CHECK_ARG(n >= 1, tool + ": -n must be at least 1 (got " + std::to_string(n) + ")");
  BRAID_CHECK_ARG(!argv.empty() && !argv[0].empty(), tool + ": no program to run");
  BRAID_CHECK_ARG(opt.nnodes >= 1, tool + ": --nnodes must be at least 1");
  BRAID_CHECK_ARG(opt.node_rank >= 0 && opt.node_rank < opt.nnodes,
                  tool + ": --node-rank " + std::to_string(opt.node_rank) + " is not in [0, " +
                      std::to_string(opt.nnodes) + ")");
  BRAID_CHECK_ARG(opt.nnodes == 1 || !opt.master.empty(),
                  tool + ": --nnodes > 1 needs --master HOST:PORT (node 0's address)");

  std::string path = resolve_program(argv[0]);
  if (path.empty()) {
    std::string msg = tool + ": " + argv[0] + ": command not found\n";
    write_all_fd(2, msg.data(), msg.size());
    return 127;
  }

  std::string secret = opt.secret;
  if (secret.empty()) secret = env_str("BRAID_SECRET").value_or("");
  if (secret.empty()) {
    BRAID_CHECK_ARG(opt.nnodes == 1,
                    tool + ": a multi-node job needs the same secret on every node: export "
                           "BRAID_SECRET=$(openssl rand -hex 32) (one value, all nodes) first");
    secret = make_job_secret();
  }
  auto timeout = opt.timeout.count() > 0 ? opt.timeout : default_timeout();
  const int world = opt.nnodes * n;

  // One run of the job: its store, its supervisor, its ranks. Every
  // attempt gets a fresh store, so no key of a failed attempt is read by
  // the next (multi-node: on the same port, node_link.h says how the other
  // nodes find the new one, and how all of them agree to run again).
  auto run_attempt = [&](int attempt, bool* restartable) -> int {
    // The store: node 0 hosts it; multi-node launchers also use it themselves.
    std::unique_ptr<TcpStoreServer> server;
    std::string store_addr;
    std::string master_host;
    int master_port = 0;
    if (!opt.master.empty()) {
      auto hp = comm::parse_host_port(opt.master, "--master");
      master_host = hp.first;
      master_port = hp.second;
    }
    if (opt.node_rank == 0) {
      if (opt.master.empty()) {
        server = std::make_unique<TcpStoreServer>("127.0.0.1", 0, secret);
        store_addr = "127.0.0.1:" + std::to_string(server->port());
      } else {
        server = std::make_unique<TcpStoreServer>("0.0.0.0", master_port, secret);
        store_addr = opt.master;
      }
    } else {
      store_addr = opt.master;
    }
    std::shared_ptr<Store> marks;  // survivable ranks' marks, read by sup
    // Declared before the link, so the link's watcher (which may call
    // stop_remote) is joined before the supervisor goes away. Made after the
    // rendezvous, so a signal during it still ends the launcher at once.
    std::optional<Supervisor> sup;
    std::unique_ptr<NodeLink> link;
    if (opt.nnodes > 1) {
      std::shared_ptr<Store> store;
      if (opt.node_rank == 0) {
        store = connect_tcp_store("127.0.0.1", master_port, secret, timeout);
        mark_attempt(*store, attempt);
      } else {
        store = connect_attempt(master_host, master_port, secret, attempt, timeout);
      }
      link = std::make_unique<NodeLink>(store, store_addr, opt.nnodes, opt.node_rank, n, timeout);
      link->rendezvous();
    }

    SupervisorOptions so;
    so.tool_name = tool;
    so.prefix_output = true;
    so.rank0_only = opt.rank0_only;
    so.first_rank = opt.node_rank * n;
    so.world = world;
    so.grace = opt.grace;
    so.max_time = opt.max_time;
    // Asked only when a rank fails; a store that cannot be reached then
    // makes the death fatal (Supervisor::survivable).
    const std::string mark_host = opt.node_rank == 0 ? "127.0.0.1" : master_host;
    const int mark_port = opt.master.empty() ? server->port() : master_port;
    so.survivable = [&marks, &link, mark_host, mark_port, secret](int rank) -> std::optional<std::string> {
      // A store this node can no longer reach cannot say: not survivable.
      if (link && link->store_lost()) return std::nullopt;
      if (!marks) marks = connect_tcp_store(mark_host, mark_port, secret, std::chrono::seconds(5));
      return survivable_reason(*marks, rank);
    };
    sup.emplace(so);
    if (link) {
      const std::string node =
          "node " + std::to_string(opt.node_rank) + " (" + hostname() + ")";
      sup->on_stop([&link, node](const StopCause& c) {
        if (c.kind == StopCause::kRankFailed) link->report_failure(c.status, c.what);
        if (c.kind == StopCause::kSignal)
          link->report_failure(c.status, "the launcher on " + node + " " + c.what, false);
        if (c.kind == StopCause::kTimeLimit)
          link->report_failure(c.status, node + " " + c.what, false);
      });
      link->watch([&sup](int status, std::string what) { sup->stop_remote(status, what); });
    }

    for (int i = 0; i < n; ++i) {
      int g = opt.node_rank * n + i;
      std::vector<std::string> over = {
          "BRAID_RANK=" + std::to_string(g),
          "BRAID_WORLD_SIZE=" + std::to_string(world),
          "BRAID_LOCAL_RANK=" + std::to_string(i),
          "BRAID_LOCAL_WORLD_SIZE=" + std::to_string(n),
          "BRAID_NODE_RANK=" + std::to_string(opt.node_rank),
          "BRAID_NNODES=" + std::to_string(opt.nnodes),
          "BRAID_STORE=" + store_addr,
          "BRAID_SECRET=" + secret,
          "RANK=" + std::to_string(g),
          "WORLD_SIZE=" + std::to_string(world),
          "LOCAL_RANK=" + std::to_string(i),
          "LOCAL_WORLD_SIZE=" + std::to_string(n),
          "GROUP_RANK=" + std::to_string(opt.node_rank),
          "BRAID_RESTART_COUNT=" + std::to_string(attempt),
          "TORCHELASTIC_RESTART_COUNT=" + std::to_string(attempt),
      };
      if (opt.timeout.count() > 0) {
        char secs[32];
        std::snprintf(secs, sizeof secs, "%g", double(opt.timeout.count()) / 1000.0);
        over.push_back(std::string("BRAID_TIMEOUT=") + secs);
      }
      if (!env_str("OMP_NUM_THREADS") && !env_has(opt.extra_env, "OMP_NUM_THREADS"))
        over.push_back("OMP_NUM_THREADS=" + std::to_string(cores_per_rank(n)));
      over.insert(over.end(), opt.extra_env.begin(), opt.extra_env.end());
      sup->start_exec(path, argv, merged_environment(over));
    }

    int status = sup->wait();
    *restartable = status != 0 && status != 124 && !sup->interrupted();
    if (link) {
      std::string what;
      int other = link->finish(status, [&] { return sup->interrupted(); }, &what);
      if (status == 0 && other != 0) {
        std::string line = tool + ": " + what + "\n";
        write_all_fd(2, line.data(), line.size());
        status = other;
      }
      // Every node decides from the job's first failure, so all run again
      // or none does.
      *restartable = link->restart_wanted() && !sup->interrupted();
    }
    return status;
  };

  BRAID_CHECK_ARG(opt.max_restarts >= 0, tool + ": --max-restarts must be at least 0");
  for (int attempt = 0;; ++attempt) {
    bool restartable = false;
    const int status = run_attempt(attempt, &restartable);
    if (!restartable || attempt >= opt.max_restarts) return status;
    const std::string line = tool + ": restarting the job (restart " +
                             std::to_string(attempt + 1) + " of " +
                             std::to_string(opt.max_restarts) + "); its ranks see "
                             "BRAID_RESTART_COUNT=" + std::to_string(attempt + 1) + "\n";
    write_all_fd(2, line.data(), line.size());
  }
}

}  // namespace braid
