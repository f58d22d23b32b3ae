// The launchers of a multi-node job talk through the job's store: they meet
// before starting ranks (same rank count everywhere, each node rank taken
// once), tell each other about the first failed rank so every node stops its
// ranks, and node 0 keeps the store up until every node has finished.
//
// Keys (all under "braid/launch/"): attempt (set by node 0 when it makes
// the store: which run of a restarting job, --max-restarts, the store is
// for), node/<i> (claim: host and pid), nproc/<i>, failed
// ("<status>|<node>|<description>"), failed_kind ("rank": a rank failed,
// which a restart may mend; "launcher": a signal, a time limit), exit/<i>,
// beat/<i> (a counter every node but 0 raises while its ranks run, so node
// 0 can tell a node that is still working from one it can no longer hear).
//
// Restarts. Node 0 makes a fresh store for every attempt, on the same
// port; another node connects with connect_attempt, which waits until the
// store it reaches is the one for its attempt (the previous one may still
// be closing). Every node reads the job's first failure before it posts
// its exit (node 0 keeps the store until every exit is in), so all of them
// decide alike whether to run again (restart_wanted).
//
// Nothing waits for an unreachable node for ever: a node whose store has
// not answered for the job's timeout calls the store lost (and names node
// 0's host), and node 0 stops waiting for a node that has neither
// finished nor beaten for as long (and names it) — for 5 s once the job
// has failed: every live node beats until it posts its exit, stopping its
// ranks included, so a node silent that long after a failure is gone.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "braid/store.h"

namespace braid::launch {

class NodeLink {
 public:
  NodeLink(std::shared_ptr<Store> store, std::string store_addr, int nnodes, int node_rank,
           int nproc, std::chrono::milliseconds timeout);
  ~NodeLink();

  // Blocks until every node has arrived. Throws Error(kInvalidArgument) on a
  // duplicate node rank or a different rank count, Error(kTimeout) naming
  // the nodes that did not come.
  void rendezvous();

  // Publishes a local failure (the first one in the job is kept).
  // `rank_failed`: a rank failed (a restart may mend it), not the launcher
  // (a signal, a time limit).
  void report_failure(int status, const std::string& description, bool rank_failed = true);

  // Starts a thread that calls on_failure(status, description) once, when
  // another node reports a failure or the store goes away or stops
  // answering for the job's timeout; on nodes other than 0 it beats.
  void watch(std::function<void(int, std::string)> on_failure);

  // True once the watcher found the store gone: report_failure and finish
  // then skip it (each would only wait out its deadline).
  bool store_lost() const { return store_lost_.load(); }

  // Records this node's final status. Node 0 then waits for every other node
  // (logging who it waits for once a minute, giving up when stop() turns
  // true, or on a node not heard from for the job's timeout, which it names)
  // and returns the first non-zero status among them (0 if none), with its
  // description in *what.
  int finish(int status, const std::function<bool()>& stop, std::string* what);

  // After finish(): whether the job's first failure was a rank's (so a
  // --max-restarts job runs again); false without a failure, or when this
  // node lost the store. The same on every node that reached the store.
  bool restart_wanted() const { return restart_wanted_; }

 private:
  std::string key(const std::string& k) const { return "braid/launch/" + k; }
  // "node 1 (node1 pid 42)", from its claim.
  std::string describe(int node) const;

  std::shared_ptr<Store> store_;
  std::string store_addr_;
  int nnodes_, node_rank_, nproc_;
  std::chrono::milliseconds timeout_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> store_lost_{false};
  bool restart_wanted_ = false;
  std::vector<std::string> claims_;  // node/<i> of every node, after rendezvous
  std::thread watcher_;
};

// Node 0: records in `store` (just made) that it serves attempt `attempt`.
void mark_attempt(Store& store, int attempt);
// Another node: connects to node 0's store at host:port and returns it once
// it says it serves `attempt`; an earlier attempt's store (still closing)
// is dropped and the connection tried again. Throws Error(kTimeout) naming
// the address when no such store answers within `timeout`.
std::shared_ptr<Store> connect_attempt(const std::string& host, int port, const std::string& secret,
                                       int attempt, std::chrono::milliseconds timeout);

}  // namespace braid::launch
