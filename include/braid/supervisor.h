// One supervisor for every way braid starts local ranks: `braid run` (exec'd
// programs, output prefixed) and `braid bench` / `braid train` (forks of the
// tool itself, output straight through).
//
// Each rank is a child in its own process group (launch/spawn.h). wait()
// copies prefixed output, forwards SIGINT, SIGTERM and SIGHUP to every
// rank's group and SIGUSR1 (a braid rank dumps its flight recorder; the job
// goes on) to every rank's own pid, and stops the job at the first of:
//   - a rank that exits non-zero or is killed by a signal, unless
//     `survivable` gives a reason its death is survivable (then one line
//     names it, braid/survivable.h, and the job goes on);
//   - a signal to the supervisor;
//   - max_time passing;
//   - stop_remote() (another node of the job failed).
// Stopping sends SIGTERM to every rank's group and SIGKILL after `grace`;
// once every rank is reaped, whatever is left in their groups gets SIGKILL.
// Then ONE line goes to stderr, the same rule for every command:
//   <tool>: rank K (pid P on host H) exited with status 3; stopped the other N ranks
//   <tool>: rank K (pid P on host H) was killed by signal 9 (SIGKILL); stopped ...
//   <tool>: received SIGTERM; stopped all N local ranks
//   <tool>: the job ran past its time limit (T s); stopped all N local ranks
// The job's status is 0 only when every rank exited 0; else the failed
// rank's shell status (128 + signal number for a signal), 128 + signal for
// a signal to the supervisor, 124 for max_time.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "braid/comm.h"

namespace braid::launch {

struct Child;  // a started rank (src/launch/spawn.h)

struct SupervisorOptions {
  std::string tool_name = "braid run";  // how the supervisor names itself
  // true: each rank's stdout and stderr are piped and copied line by line,
  // prefixed "[g] " (braid run). false: ranks write straight to this
  // process's stdout and stderr (bench and train: rank 0's progress bar
  // needs the terminal).
  bool prefix_output = true;
  bool rank0_only = false;  // with prefix_output: drop the stdout of ranks other than 0
  int first_rank = 0;       // global rank of local rank 0
  int world = 0;            // ranks in the whole job, for messages; 0: the local ranks
  std::chrono::milliseconds grace{std::chrono::seconds(3)};  // SIGTERM -> SIGKILL
  std::chrono::milliseconds max_time{0};                     // 0: no limit
  // Asked about a rank that failed while the job is not stopping: a reason
  // makes its death survivable. Unset, or nothing returned, or a throw:
  // the job stops.
  std::function<std::optional<std::string>(int global_rank)> survivable;
};

// Why wait() began to stop the job (not for stop_remote()).
struct StopCause {
  enum Kind { kRankFailed, kSignal, kTimeLimit } kind;
  int status;        // the job's status from here on
  std::string what;  // kRankFailed: "rank K (pid P on host H) exited with status S"
  int signal = 0;    // kSignal: the signal the supervisor received
};

class Supervisor {
 public:
  // Installs the signal handlers (launch/signal_pipe.h). Throws
  // Error(kInvalidArgument) when another supervisor is active in this process.
  explicit Supervisor(SupervisorOptions opt);
  // Kills (SIGKILL) and reaps every rank still running, restores the handlers.
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // Starts the next local rank as `path` with `argv` and `env` (exec).
  void start_exec(const std::string& path, const std::vector<std::string>& argv,
                  const std::vector<std::string>& env);
  // Starts the next local rank i as a fork of this process that runs
  // body(i) and exits with its value (1 if not in 0..255). An exception is
  // printed as "<tool>: rank g: <what>" and exits 1. Fork only from a
  // process whose other threads hold no locks the body needs.
  void start_fork(const std::function<int(int)>& body);

  // Called by wait() once, when it begins to stop the job for a local reason.
  void on_stop(std::function<void(const StopCause&)> f) { on_stop_ = std::move(f); }
  // From any thread: stop the job because of `what` (printed as the
  // summary), with `status` as its status. Ignored once stopping.
  void stop_remote(int status, const std::string& what);

  // Supervises until every rank has been reaped; writes the summary line;
  // returns the job's status. Call once.
  int wait();

  // True when SIGINT, SIGTERM or SIGHUP arrived since wait() returned (or
  // since the last call): for a launcher that still waits on other nodes.
  bool interrupted();

  int size() const { return int(ranks_.size()); }

 private:
  struct Rank;
  struct Remote;
  void kill_all(int sig);
  std::optional<std::string> survivable_reason_of(int global);
  void add_rank(Child c);
  // What a forked child must close: the signal pipe and the ranks' pipes.
  std::vector<int> inherited_fds() const;

  SupervisorOptions opt_;
  std::unique_ptr<class SignalPipe> signals_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  std::unique_ptr<Remote> remote_;
  std::function<void(const StopCause&)> on_stop_;
};

// A rank of a job forked by run_forked: where the job's ranks meet.
struct ForkedRank {
  int rank = 0, size = 1;
  // A private file store's directory: removed by the last rank to let go
  // of its store, and by run_forked when the job ends in any case.
  std::string store_dir;
  std::string secret;     // the job secret
  // This rank's communicator over that store; `co.secret` is set here.
  std::shared_ptr<Communicator> communicator(CommOptions co = {}) const;
};

// What bench and train do when started plainly with N ranks: forks n ranks
// of this process under a Supervisor (output straight through) that meet
// through a fresh private file store with a fresh secret, runs body in each
// and returns the job's status. A rank that marked itself survivable in that
// store (braid/survivable.h) may die without stopping the others. The
// store's directory is removed at the end.
int run_forked(const std::string& tool, int n, const std::function<int(const ForkedRank&)>& body);

}  // namespace braid::launch
