// Fail-over in `braid ps train`: which server ranks may die, the
// fault-injection flag --kill-server SERVER:STEP, and what the JSON log
// says about a fail-over.
//
// Survivable servers. With --replicas R >= 2 and dedicated servers, every
// shard is kept by a chain of R servers (ps.h), so a server rank marks its
// death survivable in the job's store (braid/survivable.h) before it
// starts serving: the supervisor (braid run, or the self-forked job) lets
// the others run on. A worker's death, a colocated server's (it is a
// worker too), any server's with R = 1, and a chain losing its last member
// (the workers' requests fail with kPeerDied naming the worker, the shard
// and the operation) still stop the job.
//
// --kill-server SERVER:STEP (repeatable; a test hook). Worker 0, about to
// push its gradients of step STEP (or of the first step after it, where
// k-of-n moved its clock past STEP; the log names the step), asks server SERVER (0-based among the
// servers) to die through the store and waits until it has stamped the
// moment of its death (CLOCK_REALTIME, so that it compares across hosts);
// the server then SIGKILLs itself. Worker 0's push is the first one after
// the death. With --spare-servers, a later kill first waits until the
// spares have replaced the earlier deaths (ps_spare.h), so the injected
// failures come one at a time, as chains of R tolerate them.
//
// --kill-worker WORKER:STEP (a test hook). Worker WORKER SIGKILLs itself
// just before its first push at clock STEP or later (k-of-n may move a
// lagging worker's clock past STEP): a worker dying without a goodbye. Under
// braid's launchers the supervisor ends the job; under a launcher that
// lets ranks die (mpirun --enable-recovery) the servers find the worker
// lost (ps/shard/roster.h) and the job fails, naming it.
//
// --hold-worker WORKER:STEP (SSP; a test hook). Worker WORKER, about to
// push step STEP, first waits until every other worker has been served its
// pull for STEP + s, as far ahead as SSP lets it read (each posts that in
// the store): a straggler whose lag does not depend on timing, so a test
// can see the others lead by exactly s (`read_lead`). The wait ends with
// kTimeout after --ps-timeout.
//
// Fail-over time: from that stamp to the moment worker 0's push is
// acknowledged, i.e. applied on every live member of every chain (ps.h),
// which needs the dead server's chains re-routed first. Detection waits on
// no timeout: the kernel closes a dead process's sockets, so the worker's
// send or read on its connection fails at once (as does a chain member's
// forward). A host that vanishes without closing its connections is
// detected only when a request passes --ps-timeout.
// The log's step record of the kill step has `killed_server`, `failover_s`
// and `failover_push_s` (the push alone: from its start, at most a poll
// interval after the death, to its ack); the done record has the same per
// kill under `failovers`, with the worker's `reroutes`, `max_reroute_s`
// (ps::WorkerStats) and `epoch`; its `chains` give each shard's live
// `members` at the end. With --spare-servers (ps_spare.h) the done record
// also has `spare_servers` and `joins`: per spare that joined, the server
// it replaced, its id, `rejoin_s` (from the death's stamp to its last
// join, for a --kill-server death) and per shard the tail that handed it
// over, the epoch the join made and `pause_s`, how long that tail held the
// shard's writes (ps::JoinReport).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "braid/ps.h"
#include "ps_train.h"

namespace braid::tool {

struct KillAt {
  int server = 0;
  int64_t step = 0;
};
// Parses every --kill-server value; throws kInvalidArgument naming the bad
// one (not SERVER:STEP, SERVER outside 0..servers-1, a negative STEP, or
// colocated servers).
std::vector<KillAt> parse_kill_server(const PsFlags& f);

struct WorkerKill {
  int worker = 0;
  int64_t step = 0;
};
// Parses --kill-worker; nothing when it is not given. Throws
// kInvalidArgument naming the bad value.
std::optional<WorkerKill> parse_kill_worker(const PsFlags& f);

// Parses --hold-worker (the same form); nothing when it is not given.
// Throws kInvalidArgument naming the bad value, or when the job is not SSP
// with at least 2 workers.
std::optional<WorkerKill> parse_hold_worker(const PsFlags& f);

// Worker `worker`'s side of --hold-worker: before_push before each push,
// pulled after each exchange with the clock its pull was served for.
class PushHold {
 public:
  PushHold(const Job& job, const PsFlags& f, int worker, int64_t steps);
  void before_push(int64_t clock);
  void pulled(int64_t clock);

 private:
  Job job_;
  std::optional<WorkerKill> hold_;
  bool pending_ = false;  // the held worker, until it has held; another, until it posted
  int staleness_ = 0, worker_ = 0, workers_ = 0;
  double timeout_s_ = 0;
};

// A dedicated server rank's side: the survivable mark, and the watcher
// that kills this process when worker 0 asks. Construct before the server
// starts serving; the destructor stops the watcher.
class ServerFaults {
 public:
  ServerFaults(const Job& job, const PsFlags& f, int server);
  ~ServerFaults();
  ServerFaults(const ServerFaults&) = delete;
  ServerFaults& operator=(const ServerFaults&) = delete;

 private:
  std::atomic<bool> stop_{false};
  std::thread watcher_;
};

// A worker's side: kills at the asked steps (worker 0), measures the
// fail-over, and gathers what the done record says about the chains.
class FailoverProbe {
 public:
  FailoverProbe(const Job& job, const PsFlags& f, int worker, int64_t steps);
  // Around the push of step `clock` (before_push also runs --kill-worker).
  void before_push(int64_t clock);
  void after_push(int64_t clock);
  // The fields worker 0 adds to the record of step `clock` (empty object
  // unless a fail-over was measured in that step).
  nlohmann::json step_fields(int64_t clock) const;
  // Every worker, before ps::Worker::finish: its acknowledged counters, for
  // worker 0's done record.
  void publish(const ps::Worker& worker);
  // Worker 0, after final_stats: "failovers" (one per kill) and, with
  // chains, "chains" (per shard: pushes and clocks the workers had
  // acknowledged beside what its surviving tail accepted) and
  // "dead_servers". `tails` are final_stats of every shard.
  nlohmann::json done_fields(const ps::Worker& worker, const std::vector<ps::ServerStats>& tails);

 private:
  Job job_;
  PsFlags flags_;
  int servers_, replicas_, spares_, worker_, workers_;
  std::vector<KillAt> kills_;
  std::optional<WorkerKill> kill_me_;  // --kill-worker, when it names this worker
  struct Measured {
    KillAt at;
    double died = 0, failover_s = -1, push_s = -1;
  };
  double push_started_ = 0;
  std::vector<Measured> done_;
};

}  // namespace braid::tool
