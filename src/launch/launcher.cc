// launch_local: start N ranks, copy their output, tear the job down when
// one fails. The supervision loop is single-threaded around poll(): signals
// arrive through a self-pipe (SIGCHLD too, so a rank's exit wakes the loop at
// once), and every rank's stdout/stderr pipe is drained in bounded slices so
// a chatty rank cannot starve the others or the reaping.
#include "braid/launch.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>

#include "braid/env.h"
#include "braid/error.h"
#include "braid/log.h"
#include "braid/store.h"
#include "comm/setup/bootstrap.h"
#include "launch/line_prefixer.h"
#include "launch/node_link.h"
#include "launch/spawn.h"

namespace braid {

using namespace launch;

namespace {

int g_wake_w = -1;  // the self-pipe's write end, for the signal handlers

void on_signal(int sig) {
  int saved = errno;
  char c = char(sig);
  (void)!::write(g_wake_w, &c, 1);
  errno = saved;
}

// Installs the launcher's signal handlers and the self-pipe; restores both.
class SignalGuard {
 public:
  SignalGuard() {
    int p[2];
    if (::pipe2(p, O_NONBLOCK | O_CLOEXEC) != 0) throw_errno("launch: pipe");
    rd_ = p[0];
    g_wake_w = p[1];
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < kSigs; ++i) {
      if (kSignals[i] == SIGPIPE) {
        struct sigaction ign;
        std::memset(&ign, 0, sizeof ign);
        ign.sa_handler = SIG_IGN;
        ::sigaction(SIGPIPE, &ign, &old_[i]);
      } else {
        ::sigaction(kSignals[i], &sa, &old_[i]);
      }
    }
  }
  ~SignalGuard() {
    for (size_t i = 0; i < kSigs; ++i) ::sigaction(kSignals[i], &old_[i], nullptr);
    ::close(g_wake_w);
    g_wake_w = -1;
    ::close(rd_);
  }
  int fd() const { return rd_; }
  // Wakes the loop from another thread (byte 0 = "look at the remote flag").
  static void poke() {
    char c = 0;
    (void)!::write(g_wake_w, &c, 1);
  }

 private:
  static constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE};
  static constexpr size_t kSigs = sizeof kSignals / sizeof kSignals[0];
  int rd_ = -1;
  struct sigaction old_[kSigs];
};

std::mutex g_launch_mu;  // one launch at a time per process

struct RankProc {
  int global = 0;
  Child child;
  bool alive = true;
  int wstatus = 0;
  std::unique_ptr<LinePrefixer> out, err;
};

struct Outcome {
  std::string summary;  // printed to stderr when non-empty
  int status = 0;
};

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
  std::unique_lock<std::mutex> one_at_a_time(g_launch_mu, std::try_to_lock);
  BRAID_CHECK_ARG(one_at_a_time.owns_lock(), tool + ": another launch is running in this process");

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
  std::unique_ptr<NodeLink> link;
  if (opt.nnodes > 1) {
    auto store = connect_tcp_store(opt.node_rank == 0 ? "127.0.0.1" : master_host, master_port,
                                   secret, timeout);
    link = std::make_unique<NodeLink>(store, store_addr, opt.nnodes, opt.node_rank, n, timeout);
    link->rendezvous();
  }

  SignalGuard signals;
  std::atomic<bool> remote_failed{false};
  std::mutex remote_mu;
  int remote_status = 0;
  std::string remote_what;
  if (link)
    link->watch([&](int status, std::string what) {
      {
        std::lock_guard<std::mutex> l(remote_mu);
        remote_status = status;
        remote_what = std::move(what);
      }
      remote_failed.store(true);
      SignalGuard::poke();
    });

  // Start the ranks.
  std::vector<RankProc> ranks(static_cast<size_t>(n));
  const std::string host = hostname();
  auto kill_all = [&](int sig) {
    for (auto& r : ranks)
      if (r.child.pid > 0) ::kill(-r.child.pid, sig);
  };
  try {
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
      };
      if (opt.timeout.count() > 0) {
        char secs[32];
        std::snprintf(secs, sizeof secs, "%g", double(opt.timeout.count()) / 1000.0);
        over.push_back(std::string("BRAID_TIMEOUT=") + secs);
      }
      if (!env_str("OMP_NUM_THREADS") && !env_has(opt.extra_env, "OMP_NUM_THREADS"))
        over.push_back("OMP_NUM_THREADS=" + std::to_string(cores_per_rank(n)));
      over.insert(over.end(), opt.extra_env.begin(), opt.extra_env.end());
      RankProc& r = ranks[size_t(i)];
      r.global = g;
      r.child = spawn(path, argv, merged_environment(over));
      std::string prefix = "[" + std::to_string(g) + "] ";
      r.out = std::make_unique<LinePrefixer>(prefix, 1, !opt.rank0_only || g == 0);
      r.err = std::make_unique<LinePrefixer>(prefix, 2, true);
    }
  } catch (...) {
    kill_all(SIGKILL);
    for (auto& r : ranks)
      if (r.child.pid > 0) ::waitpid(r.child.pid, nullptr, 0);
    throw;
  }

  // Supervise.
  Outcome outcome;
  bool stopping = false, killed = false;
  uint64_t kill_at = 0, drained_by = 0;
  const uint64_t start = now_ns();
  const uint64_t grace_ns = uint64_t(opt.grace.count()) * 1000000ull;
  int live = n;
  auto begin_stop = [&](int sig) {
    stopping = true;
    kill_all(sig);
    kill_at = now_ns() + grace_ns;
  };
  auto others = [&](int count) {
    return "stopped the other " + std::to_string(count) + (count == 1 ? " rank" : " ranks");
  };
  for (;;) {
    std::vector<pollfd> pfds;
    std::vector<std::pair<RankProc*, bool>> who;  // (rank, is_stderr)
    pfds.push_back({signals.fd(), POLLIN, 0});
    who.push_back({nullptr, false});
    for (auto& r : ranks) {
      if (r.child.out_fd >= 0) {
        pfds.push_back({r.child.out_fd, POLLIN, 0});
        who.push_back({&r, false});
      }
      if (r.child.err_fd >= 0) {
        pfds.push_back({r.child.err_fd, POLLIN, 0});
        who.push_back({&r, true});
      }
    }
    if (live == 0 && (pfds.size() == 1 || now_ns() > drained_by)) break;
    int pr = ::poll(pfds.data(), pfds.size(), 100);
    if (pr < 0 && errno != EINTR) throw_errno("launch: poll");

    // Signals (and wake-ups from the remote watcher).
    if (pr > 0 && (pfds[0].revents & POLLIN)) {
      char sigs[64];
      ssize_t k;
      while ((k = ::read(signals.fd(), sigs, sizeof sigs)) > 0) {
        for (ssize_t j = 0; j < k; ++j) {
          int s = sigs[j];
          if (s != SIGINT && s != SIGTERM && s != SIGHUP) continue;
          if (!stopping) {
            begin_stop(s);
            outcome.status = 128 + s;
            outcome.summary = tool + ": received " + signal_name(s) + "; stopped all " +
                              std::to_string(n) + " local ranks";
            if (link) link->report_failure(outcome.status, "the launcher on node " +
                                                               std::to_string(opt.node_rank) +
                                                               " (" + host + ") received " +
                                                               signal_name(s));
          } else if (!killed) {
            kill_all(SIGKILL);  // a second signal: no more grace
            killed = true;
          }
        }
      }
    }

    // Output.
    for (size_t j = 1; j < pfds.size(); ++j) {
      if (!(pfds[j].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      auto [r, is_err] = who[j];
      int& fd = is_err ? r->child.err_fd : r->child.out_fd;
      LinePrefixer& lp = is_err ? *r->err : *r->out;
      if (!lp.pump(fd)) {
        lp.finish();
        ::close(fd);
        fd = -1;
      }
    }

    // Exits.
    for (auto& r : ranks) {
      if (!r.alive) continue;
      int st = 0;
      pid_t w = ::waitpid(r.child.pid, &st, WNOHANG);
      if (w != r.child.pid) continue;
      r.alive = false;
      r.wstatus = st;
      --live;
      if (live == 0) drained_by = now_ns() + 1000000000ull;
      bool failed = !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
      if (failed && !stopping) {
        std::string what = "rank " + std::to_string(r.global) + " (pid " +
                           std::to_string(r.child.pid) + " on host " + host + ") " +
                           describe_wait_status(st);
        outcome.status = shell_status(st);
        outcome.summary = tool + ": " + what + "; " + others(world - 1);
        if (link) link->report_failure(outcome.status, what);
        begin_stop(SIGTERM);
      }
    }

    if (!stopping && remote_failed.load()) {
      std::lock_guard<std::mutex> l(remote_mu);
      outcome.status = remote_status;
      outcome.summary = tool + ": " + remote_what + "; " + others(world - 1);
      begin_stop(SIGTERM);
    }
    if (!stopping && opt.max_time.count() > 0 &&
        now_ns() - start > uint64_t(opt.max_time.count()) * 1000000ull) {
      outcome.status = 124;
      char limit[32];
      std::snprintf(limit, sizeof limit, "%g", double(opt.max_time.count()) / 1000.0);
      outcome.summary = tool + ": the job ran past its time limit (" + limit +
                        " s); stopped all " +
                        std::to_string(n) + " local ranks";
      if (link) link->report_failure(124, "node " + std::to_string(opt.node_rank) +
                                              " reached its time limit");
      begin_stop(SIGTERM);
    }
    // A stopped job leaves nothing behind: once every rank is reaped, what
    // is left in their process groups (background children) goes too.
    if (stopping && !killed && (live == 0 || now_ns() > kill_at)) {
      kill_all(SIGKILL);
      killed = true;
    }
  }
  // Whatever is left in the pipes (a rank's background children may keep
  // them open) is not worth waiting for.
  for (auto& r : ranks) {
    for (int* fd : {&r.child.out_fd, &r.child.err_fd})
      if (*fd >= 0) {
        (fd == &r.child.out_fd ? r.out : r.err)->finish();
        ::close(*fd);
        *fd = -1;
      }
  }
  if (!outcome.summary.empty()) {
    std::string line = outcome.summary + "\n";
    write_all_fd(2, line.data(), line.size());
  }
  if (link) {
    std::string what;
    int other = link->finish(outcome.status, [&] {
      char c;
      bool sig = false;
      while (::read(signals.fd(), &c, 1) > 0)
        if (c == SIGINT || c == SIGTERM || c == SIGHUP) sig = true;
      return sig;
    }, &what);
    if (outcome.status == 0 && other != 0) {
      std::string line = tool + ": " + what + "\n";
      write_all_fd(2, line.data(), line.size());
      outcome.status = other;
    }
  }
  return outcome.status;
}

}  // namespace braid
