// ps::Worker: one worker's connections to every server; push gradients and
// pull parameters, blocking or through a Handle, one frame per server per
// training step (docs/PS.md).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "braid/ps_keys.h"
#include "braid/ps_server.h"
#include "braid/store.h"

namespace braid::ps {

struct WorkerOptions {
  int rank = 0;     // this worker's id, 0 ≤ rank < W
  int replicas = 1;  // R, as the servers'
  std::string secret;
  std::chrono::milliseconds timeout{std::chrono::seconds(120)};  // every wait
  // Bytes of each direction's ring on a connection to a server on this
  // host: frames then travel through shared memory, and the server applies
  // a push where it lies. 0 keeps every connection on TCP.
  size_t shm_bytes = size_t(4) << 20;
};

// A worker's own counters (Worker::worker_stats).
struct WorkerStats {
  // Per shard: push frames and clock advances (kAdvance pushes and bare
  // clocks) the shard's chain acknowledged, i.e. applied on every live
  // member. Re-sends after a fail-over count once.
  std::vector<int64_t> pushes_acked, clocks_acked;
  int64_t reroutes = 0;       // requests that lost a server and were re-routed
  double max_reroute_s = 0;   // longest: from the lost connection to the last reply
  uint32_t epoch = 0;         // chain configuration the worker routes by
  int64_t shm_links = 0;      // connections moved to shared memory (link.h)
};

// A request in flight. wait() rethrows the request's error.
class Handle {
 public:
  Handle() = default;
  void wait();
  bool test();  // true once done (wait() then returns at once)
  struct State;
  explicit Handle(std::shared_ptr<State> s) : s_(std::move(s)) {}

 private:
  std::shared_ptr<State> s_;
};

// One key range of a push or pull: dense key k (all of it), or the listed
// rows of sparse key k. `data` holds size (dense) or rows.size()·width
// floats.
struct KeyData {
  KeyId key = 0;
  std::vector<int64_t> rows;  // sparse only
  float* data = nullptr;
};

// One training step's requests, made together by Worker::step: with R = 1
// each server gets them as ONE frame (a batch), so a step costs one round
// trip per server instead of one per request.
struct StepRequest {
  // When push_round: round `clock`'s training sums go to server 0 (as
  // report), then `grads` are pushed advancing the clock (as push with
  // advance).
  bool push_round = false;
  int64_t clock = 0;
  std::vector<KeyData> grads;
  double sums[3] = {0, 0, 0};  // loss sum, rows, correct
  // Then `pull` is pulled for a worker at `pull_clock` (as pull); none when
  // empty.
  std::vector<KeyData> pull;
  int64_t pull_clock = 0;
  // Then, when stats, every server's counters are read (as stats(s,
  // stats_round, stats_wait && s == 0)).
  bool stats = false;
  int64_t stats_round = -1;
  bool stats_wait = false;
};

// The client side: one authenticated connection per server. Calls on one
// Worker run in the order made; the async forms return at once and run on
// the worker's I/O thread; requests to different servers are in flight
// together. Not for concurrent use from several threads.
class Worker {
 public:
  // Waits for every server's address in `store`, connects, authenticates
  // and says hello. Throws kTimeout / kAuth / kInvalidArgument.
  Worker(const Layout& layout, const WorkerOptions& opt, std::shared_ptr<Store> store);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Pushes gradients of round `clock`; with `advance`, this worker has
  // finished round `clock` on every server (servers not named get a bare
  // clock frame). Gradient lengths must match the keys.
  void push(const std::vector<KeyData>& grads, int64_t clock, bool advance);
  // Pulls parameters as the consistency allows for a worker at `clock`.
  // Returns the clock the servers assign (kRoundK: the open round; else
  // `clock`); with several servers, the smallest.
  int64_t pull(const std::vector<KeyData>& out, int64_t clock);
  // push (advancing the clock), then pull for clock + 1.
  int64_t push_pull(const std::vector<KeyData>& grads, const std::vector<KeyData>& out,
                    int64_t clock);
  // The requests of `r`, in its order, as one exchange (StepRequest). Returns
  // the clock the pull was assigned (pull_clock without a pull); fills
  // `stats` (one per server) when r.stats.
  int64_t step(const StepRequest& r, std::vector<ServerStats>* stats = nullptr);
  Handle push_async(std::vector<KeyData> grads, int64_t clock, bool advance);
  Handle pull_async(std::vector<KeyData> out, int64_t clock, int64_t* assigned = nullptr);

  // Sends this round's training sums (loss sum, rows, correct) to server 0,
  // which adds them up per round for the log.
  void report(int64_t clock, double loss_sum, double rows, double correct);
  // Server `s`'s counters; with wait_round ≥ 0 (not kAsp) it first waits
  // until that round closed there, and the report sums are that round's.
  ServerStats stats(int s, int64_t round = -1, bool wait_round = false);
  // Server `s`'s counters once every other worker has said goodbye
  // (finish), so they count every push of the job: a straggler's last,
  // late push may arrive after the others are done.
  ServerStats final_stats(int s);
  // Asks every server for its hot rows (ServerOptions::hot_keys); later
  // pulls read those rows from replicas. Returns the number of hot rows.
  int64_t refresh_hot();
  // The hot rows the last refresh_hot learned, as (key, row).
  std::vector<std::pair<KeyId, int64_t>> hot_rows() const;
  // Says goodbye to every server (they count the workers still attached).
  void finish();
  WorkerStats worker_stats() const;

  int rank() const;
  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace braid::ps
