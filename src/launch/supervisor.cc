// The supervision loop is single-threaded around poll(): signals arrive
// through a self-pipe (SIGCHLD too, so a rank's exit wakes the loop at once),
// and every rank's stdout/stderr pipe is drained in bounded slices so a
// chatty rank cannot starve the others or the reaping.
#include "braid/supervisor.h"

#include <algorithm>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <mutex>

#include "braid/env.h"
#include "braid/error.h"
#include "braid/store.h"
#include "braid/survivable.h"
#include "launch/line_prefixer.h"
#include "launch/signal_pipe.h"
#include "launch/spawn.h"

namespace braid::launch {

struct Supervisor::Rank {
  int global = 0;
  Child child;
  bool alive = true;
  std::unique_ptr<LinePrefixer> out, err;
};

struct Supervisor::Remote {
  std::mutex mu;
  bool failed = false;
  int status = 0;
  std::string what;
};

Supervisor::Supervisor(SupervisorOptions opt)
    : opt_(std::move(opt)),
      signals_(std::make_unique<SignalPipe>(opt_.tool_name)),
      remote_(std::make_unique<Remote>()) {
  BRAID_CHECK_ARG(opt_.grace.count() >= 0, opt_.tool_name + ": the grace period is negative");
  BRAID_CHECK_ARG(opt_.max_time.count() >= 0, opt_.tool_name + ": the time limit is negative");
}

Supervisor::~Supervisor() {
  kill_all(SIGKILL);
  for (auto& r : ranks_) {
    if (r->alive) ::waitpid(r->child.pid, nullptr, 0);
    for (int fd : {r->child.out_fd, r->child.err_fd})
      if (fd >= 0) ::close(fd);
  }
}

void Supervisor::kill_all(int sig) {
  for (auto& r : ranks_)
    if (r->child.pid > 0) ::kill(-r->child.pid, sig);
}

std::vector<int> Supervisor::inherited_fds() const {
  std::vector<int> fds = {signals_->fd(), signals_->write_fd()};
  for (auto& r : ranks_)
    for (int fd : {r->child.out_fd, r->child.err_fd})
      if (fd >= 0) fds.push_back(fd);
  return fds;
}

void Supervisor::add_rank(Child c) {
  auto r = std::make_unique<Rank>();
  r->global = opt_.first_rank + size();
  r->child = c;
  if (opt_.prefix_output) {
    std::string prefix = "[";  // appended: GCC 12 warns falsely on "literal" + string&&
    prefix += std::to_string(r->global);
    prefix += "] ";
    r->out = std::make_unique<LinePrefixer>(prefix, 1, !opt_.rank0_only || r->global == 0);
    r->err = std::make_unique<LinePrefixer>(prefix, 2, true);
  }
  ranks_.push_back(std::move(r));
}

void Supervisor::start_exec(const std::string& path, const std::vector<std::string>& argv,
                            const std::vector<std::string>& env) {
  add_rank(spawn(path, argv, env));
}

void Supervisor::start_fork(const std::function<int(int)>& body) {
  const int i = size();
  const int g = opt_.first_rank + i;
  const std::string& tool = opt_.tool_name;
  std::fflush(nullptr);  // what is buffered now must not be written by the child too
  add_rank(fork_child(opt_.prefix_output, inherited_fds(), [&] {
    int code = 1;
    try {
      int r = body(i);
      code = r >= 0 && r <= 255 ? r : 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: rank %d: %s\n", tool.c_str(), g, e.what());
    } catch (...) {
      std::fprintf(stderr, "%s: rank %d: an exception that is not a std::exception\n",
                   tool.c_str(), g);
    }
    std::fflush(nullptr);
    ::_exit(code);
  }));
}

void Supervisor::stop_remote(int status, const std::string& what) {
  {
    std::lock_guard<std::mutex> l(remote_->mu);
    if (remote_->failed) return;
    remote_->failed = true;
    remote_->status = status;
    remote_->what = what;
  }
  signals_->poke();
}

bool Supervisor::interrupted() {
  bool sig = false;
  signals_->drain([&](int s) { sig = sig || s == SIGINT || s == SIGTERM || s == SIGHUP; });
  return sig;
}

std::optional<std::string> Supervisor::survivable_reason_of(int global) {
  if (!opt_.survivable) return std::nullopt;
  try {
    return opt_.survivable(global);
  } catch (const std::exception& e) {
    // The question could not be answered (the store is gone): not survivable.
    const std::string line = opt_.tool_name + ": could not tell whether rank " +
                             std::to_string(global) + "'s death is survivable: " + e.what() + "\n";
    write_all_fd(2, line.data(), line.size());
    return std::nullopt;
  }
}

int Supervisor::wait() {
  const std::string& tool = opt_.tool_name;
  const int n = size();
  const int world = opt_.world > 0 ? opt_.world : n;
  const std::string host = hostname();
  std::string summary;  // printed to stderr when non-empty
  int status = 0;
  bool stopping = false, killed = false;
  uint64_t kill_at = 0, drained_by = 0;
  const uint64_t start = now_ns();
  const uint64_t grace_ns = uint64_t(opt_.grace.count()) * 1000000ull;
  int live = 0, survived = 0;
  for (auto& r : ranks_) live += r->alive ? 1 : 0;
  auto others = [&] {
    int k = world - 1 - survived;
    return "stopped the other " + std::to_string(k) + (k == 1 ? " rank" : " ranks");
  };
  auto all_local = [&] { return "stopped all " + std::to_string(n) + " local ranks"; };
  // Starts stopping; the first cause sets the status and the summary. A
  // signal to the supervisor is forwarded as itself, anything else is SIGTERM.
  auto begin_stop = [&](int st, std::string line, const StopCause* cause) {
    stopping = true;
    status = st;
    summary = tool + ": " + std::move(line);
    kill_all(cause && cause->kind == StopCause::kSignal ? cause->signal : SIGTERM);
    kill_at = now_ns() + grace_ns;
    if (cause && on_stop_) on_stop_(*cause);
  };
  for (;;) {
    std::vector<pollfd> pfds = {{signals_->fd(), POLLIN, 0}};
    std::vector<std::pair<Rank*, bool>> who = {{nullptr, false}};  // (rank, is_stderr)
    for (auto& r : ranks_)
      for (bool is_err : {false, true}) {
        int fd = is_err ? r->child.err_fd : r->child.out_fd;
        if (fd < 0) continue;
        pfds.push_back({fd, POLLIN, 0});
        who.push_back({r.get(), is_err});
      }
    if (live == 0 && (pfds.size() == 1 || now_ns() > drained_by)) break;
    int pr = ::poll(pfds.data(), pfds.size(), 100);
    if (pr < 0 && errno != EINTR) throw_errno("launch: poll");

    if (pr > 0 && (pfds[0].revents & POLLIN))
      signals_->drain([&](int s) {
        if (s == SIGUSR1) {  // "dump what you are doing": to each rank's own pid
          for (auto& r : ranks_)
            if (r->alive && r->child.pid > 0) ::kill(r->child.pid, SIGUSR1);
          return;
        }
        if (s != SIGINT && s != SIGTERM && s != SIGHUP) return;
        if (!stopping) {
          StopCause c{StopCause::kSignal, 128 + s, "received " + signal_name(s), s};
          begin_stop(128 + s, c.what + "; " + all_local(), &c);
        } else if (!killed) {
          kill_all(SIGKILL);  // a second signal: no more grace
          killed = true;
        }
      });

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

    // Every rank that ended since the last pass, those killed by a signal
    // first: when a rank dies and another fails because of it, both may be
    // reaped in one pass, and the cause is the one to name.
    std::vector<std::pair<Rank*, int>> ended;
    const auto reap = [&] {
      for (auto& r : ranks_) {
        if (!r->alive) continue;
        int st = 0;
        if (::waitpid(r->child.pid, &st, WNOHANG) != r->child.pid) continue;
        r->alive = false;
        if (--live == 0) drained_by = now_ns() + 1000000000ull;
        ended.emplace_back(r.get(), st);
      }
    };
    reap();
    // A rank that exits because a peer was killed can be reapable before
    // that peer is: the killed process closes its sockets before its exit
    // is posted. Before a failure stops the job, a short look for such a
    // cause (only on this path, which ends the job anyway).
    const auto exited_failing = [](const std::pair<Rank*, int>& e) {
      return WIFEXITED(e.second) && WEXITSTATUS(e.second) != 0;
    };
    const auto by_signal = [](const std::pair<Rank*, int>& e) { return WIFSIGNALED(e.second); };
    if (!stopping && std::any_of(ended.begin(), ended.end(), exited_failing)) {
      for (int i = 0; i < 10 && live > 0 && std::none_of(ended.begin(), ended.end(), by_signal); ++i) {
        ::usleep(5000);
        reap();
      }
    }
    std::stable_partition(ended.begin(), ended.end(), by_signal);
    for (auto& [r, st] : ended) {
      const bool failed = !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
      if (failed && !stopping) {
        StopCause c{StopCause::kRankFailed, shell_status(st),
                    "rank " + std::to_string(r->global) + " (pid " + std::to_string(r->child.pid) +
                        " on host " + host + ") " + describe_wait_status(st)};
        if (const auto why = survivable_reason_of(r->global)) {
          ++survived;
          const std::string line = tool + ": " + c.what + "; the job goes on (" + *why + ")\n";
          write_all_fd(2, line.data(), line.size());
          continue;
        }
        begin_stop(c.status, c.what + "; " + others(), &c);
      }
    }

    if (!stopping) {
      std::unique_lock<std::mutex> l(remote_->mu);
      if (remote_->failed) {
        std::string what = remote_->what;
        int st = remote_->status;
        l.unlock();
        begin_stop(st, what + "; " + others(), nullptr);
      }
    }
    if (!stopping && opt_.max_time.count() > 0 &&
        now_ns() - start > uint64_t(opt_.max_time.count()) * 1000000ull) {
      char limit[32];
      std::snprintf(limit, sizeof limit, "%g", double(opt_.max_time.count()) / 1000.0);
      StopCause c{StopCause::kTimeLimit, 124, std::string("ran past its time limit (") + limit + " s)"};
      begin_stop(124, "the job " + c.what + "; " + all_local(), &c);
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
  for (auto& r : ranks_)
    for (bool is_err : {false, true}) {
      int& fd = is_err ? r->child.err_fd : r->child.out_fd;
      if (fd < 0) continue;
      (is_err ? r->err : r->out)->finish();
      ::close(fd);
      fd = -1;
    }
  if (!summary.empty()) {
    std::string line = summary + "\n";
    write_all_fd(2, line.data(), line.size());
  }
  return status;
}

std::shared_ptr<Communicator> ForkedRank::communicator(CommOptions co) const {
  co.secret = secret;
  return Communicator::create(rank, size, make_file_store(store_dir, size), co);
}

int run_forked(const std::string& tool, int n, const std::function<int(const ForkedRank&)>& body) {
  BRAID_CHECK_ARG(n >= 1, tool + ": the number of ranks must be at least 1 (got " +
                              std::to_string(n) + ")");
  std::string dir = "/tmp/braid_job_XXXXXX";
  if (!::mkdtemp(dir.data())) throw_errno(tool + ": mkdtemp");
  struct RemoveDir {
    std::string dir;
    ~RemoveDir() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } remove{dir};
  const std::string secret = make_job_secret();
  SupervisorOptions opt;
  opt.tool_name = tool;
  opt.prefix_output = false;
  opt.survivable = [&dir](int rank) {
    // A view without a member count: it never removes the ranks' directory.
    return survivable_reason(*make_file_store(dir), rank);
  };
  Supervisor sup(opt);
  for (int i = 0; i < n; ++i)
    sup.start_fork([&](int rank) { return body(ForkedRank{rank, n, dir, secret}); });
  return sup.wait();
}

}  // namespace braid::launch
