// One server's keys, optimizer state, rounds, clocks and counters, behind
// one mutex. Private to src/ps. Knows frames (wire.h) but not sockets: the
// server's connection threads validate a frame's shape here, read its
// payload, then hand it over; a pull that must wait for a round parks on
// the condition variable with the frame's deadline.
//
// Invariants:
//  - closed_ rounds have been applied, in order; round closed_ is open.
//    BSP/SSP/k-of-n pushes are buffered per round and per worker and folded
//    in worker order (then folded late pushes in arrival order), so a
//    round's result does not depend on arrival order;
//  - a push is accepted only for a round in [closed_, closed_ + ahead], where
//    ahead is 0 (BSP, k-of-n) or s (SSP): a worker cannot push past its pull,
//    and a bad client cannot make the server buffer unbounded rounds;
//  - clocks_[w] only grows; in BSP/SSP closed_ == min over workers;
//  - last_write_[w] is the request id of worker w's last applied write
//    (push, clock, report, bye); a write with an id not above it is a
//    re-send after a chain fail-over and is acknowledged without applying
//    it again (counted in writes_duplicate);
//  - dropped_at_[w] != 0 while worker w's connection has closed (its peer
//    went away) before its goodbye and it has not connected again; once
//    lost_ is set (fail) every waiter and every later request fails with it.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "braid/checkpoint.h"
#include "braid/ps.h"
#include "ps/hot/hot_keys.h"
#include "ps/io/reply_buf.h"
#include "ps/io/wire.h"

namespace braid::ps {

class ShardState {
 public:
  ShardState(const Layout& layout, const ServerOptions& opt,
             const std::vector<std::vector<float>>& init,
             std::function<void(KeyId, int64_t, float*)> init_sparse);

  // The payload length frame h must carry from worker `w` (-1: not attached
  // yet, only hello is allowed). Throws kInvalidArgument / kProtocol naming
  // what is wrong, before anything is read or allocated.
  uint64_t expected_payload(const wire::Header& h, int w) const;
  // Runs a validated frame; fills the reply's payload (and header clock).
  // May wait until `deadline_ns`. Throws as expected_payload, or kTimeout.
  // A kBatch runs its sub-frames in order (shard_batch.cc).
  void handle(const wire::Header& h, const uint8_t* payload, wire::Header& reply,
              ReplyBuf& out, int64_t deadline_ns);

  // Connection bookkeeping: hello takes a worker id, a closed connection
  // gives it back. `gone`: the worker's end closed (a dead or failed
  // process, or one that stopped using this server), not this server
  // dropping it for a bad request; before its goodbye, that makes it a
  // dropped worker until it attaches again.
  void attach(int w);
  void detach(int w, bool gone);
  // Lost workers (server_lost.cc judges them): the workers dropped at or before
  // `before_ns` (now_ns's clock), with the clock each had reached here.
  struct Drop {
    int worker = 0;
    int64_t clock = 0;
  };
  std::vector<Drop> dropped_before(int64_t before_ns) const;
  // The job lost a worker (`why` names it): wakes every waiter, which then
  // fails with `why`, as does every later request and wait_finished. The
  // first reason is kept.
  void fail(const std::string& why);
  void stop();  // wakes every waiter with an error
  void set_epoch(uint32_t e);  // the chain epoch reported in stats
  ServerStats stats() const;
  void count_traffic(uint64_t in, uint64_t out, bool rejected);
  void wait_finished(std::chrono::milliseconds timeout);

  // Hot keys (hot_keys.h): `sink` gets each refresh (closed rounds, rows,
  // payload), called under the state's mutex at a round close, so it must
  // only queue. hot_set fills a kHotSet reply.
  using HotSink = std::function<void(int64_t round, uint64_t rows, std::vector<uint8_t>)>;
  void set_hot_sink(HotSink sink);
  // Hot pulls inside a batch (shard_batch.cc) go to the server's read
  // replicas: `check` returns a kHotPull's payload length (throws on a bad
  // one); `run` answers it, appending the rows to `out` and setting the
  // reply's payload and clock. run is called without the mutex (it may wait
  // for a refresh, and may count on this state). Unset: hot keys are off.
  struct HotPulls {
    std::function<uint64_t(const wire::Header&)> check;
    std::function<void(const wire::Header&, const uint8_t*, wire::Header&, ReplyBuf&,
                       int64_t)>
        run;
  };
  void set_hot_pulls(HotPulls p);
  void hot_set(ReplyBuf& out) const;
  void count_replica_pulls(int64_t rows);

  // Checkpoints (braid/ps_checkpoint.h; shard_checkpoint.cc). save_locked
  // runs at a round close, under the mutex, and writes the shard when that
  // round count is due and `saves` (when set) says this replica writes it:
  // in a chain, its live head does, so a shard keeps being saved after its
  // home server died. restore runs in the constructor.
  void save_locked();
  void set_saves(std::function<bool()> saves) { saves_ = std::move(saves); }
  void restore(const std::string& step_dir);

  // State transfer to a server joining the shard's chain (chain_join.h):
  // the checkpoint above plus the live state a checkpoint leaves out
  // (buffered rounds, clocks, request ids, reports, counters), written to
  // `path` under the mutex by transfer_out and installed by transfer_in
  // (shard_transfer.cc). Traffic counters stay each server's own.
  // transfer_in returns how many open (buffered, not yet closed) rounds
  // the installed state holds.
  void transfer_out(const std::string& path) const;
  int64_t transfer_in(const std::string& path);

 private:
  struct Dense {
    int64_t begin = 0, end = 0;
    std::vector<float> w, state;
    int64_t t = 0;
  };
  struct Sparse {
    std::unordered_map<int64_t, size_t> index;  // row -> position
    std::vector<float> w, state;                // by position
    int64_t t = 0;
  };
  // One sparse key's gradients: rows in arrival order (a row may repeat),
  // `width` floats each in `g`. Flat, so a push of n rows costs a few
  // allocations, not 2n.
  struct SparseGrad {
    std::vector<int64_t> rows;
    std::vector<float> g;
  };
  // One contribution: gradients by key (dense: the slice; sparse: by row).
  struct Contribution {
    std::map<KeyId, std::vector<float>> dense;
    std::map<KeyId, SparseGrad> sparse;
    bool empty() const { return dense.empty() && sparse.empty(); }
  };
  struct Round {
    std::vector<Contribution> by_worker;
    std::vector<bool> clocked;
    int n_clocked = 0;
    std::vector<Contribution> folded;
  };

  std::string where(const wire::Header& h) const;
  // The shard as a checkpoint of views into it (valid while the mutex is
  // held; `rows` holds the sparse row ids), and its inverse.
  Checkpoint checkpoint_locked(std::vector<std::vector<int64_t>>& rows) const;
  void restore_checkpoint(const Checkpoint& ck, const std::string& path);
  // A checkpoint of `servers` shards (braid/ps_checkpoint.h) read by a job
  // of another server count: every shard file, keeping this shard's part.
  void restore_resharded(const std::string& step_dir, int servers);
  // Checks what shard `shard` of a save by `servers` servers must hold to
  // restore into this job (format, counts, rule, known keys); its step.
  int64_t check_saved(const Checkpoint& ck, const std::string& path, int servers,
                      int shard) const;
  void add_live_locked(Checkpoint& ck) const;
  void restore_live(const Checkpoint& ck, const std::string& path);
  // handle's body for one non-batch frame, under mu_; APPENDS its reply
  // payload to `out` and sets reply.payload to that payload's length.
  void handle_locked(const wire::Header& h, const uint8_t* payload, wire::Header& reply,
                     ReplyBuf& out, std::unique_lock<std::mutex>& lk,
                     int64_t deadline_ns);
  // kBatch (shard_batch.cc): the payload bound checked before it is read,
  // and the run of its sub-frames.
  uint64_t batch_payload(const wire::Header& h, int w) const;
  void handle_batch(const wire::Header& h, const uint8_t* payload, ReplyBuf& out,
                    std::unique_lock<std::mutex>& lk, int64_t deadline_ns);
  ServerStats snapshot_locked() const;
  size_t sparse_row(KeyId k, int64_t row);  // creates on first touch
  Round& round(int64_t r);
  void add_push(Contribution& c, const wire::Header& h, const uint8_t* payload);
  void apply_now(const wire::Header& h, const uint8_t* payload);  // ASP
  void push(const wire::Header& h, const uint8_t* payload);
  void clock(int w, int64_t r);
  // ASP's clock: worker w finished step r; the steps every worker finished
  // count as closed rounds (for checkpoints and the counters).
  void clock_async(int w, int64_t r);
  void late(Contribution&& c, int64_t into);  // counts; folds into round `into`
  void try_close();
  Contribution summed(const std::vector<const Contribution*>& parts) const;
  void apply(const Contribution& sum, int contributors, int64_t round);
  void pull(const wire::Header& h, const uint8_t* payload, wire::Header& reply,
            ReplyBuf& out, std::unique_lock<std::mutex>& lk, int64_t deadline_ns);
  void wait_until(std::unique_lock<std::mutex>& lk, int64_t deadline_ns,
                  const std::function<bool()>& ready,
                  const std::function<std::string()>& what);  // built only on failure

  const Layout layout_;
  const ServerOptions opt_;
  const int W_;
  std::function<void(KeyId, int64_t, float*)> init_sparse_;
  std::vector<Dense> dense_;
  std::vector<Sparse> sparse_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  // wait_finished's own: woken by a bye, not by every round close.
  std::condition_variable finished_cv_;
  bool stopping_ = false;
  int64_t closed_ = 0;
  std::map<int64_t, Round> rounds_;
  std::vector<int64_t> clocks_, contributed_;
  std::vector<bool> attached_, finished_;
  std::vector<int64_t> dropped_at_;
  std::string lost_;
  std::vector<uint64_t> last_write_;
  struct Report {
    double sums[3] = {0, 0, 0};
    int workers = 0;
  };
  std::map<int64_t, Report> reports_;
  std::unique_ptr<HotCounter> hot_;  // set when opt_.hot_keys
  HotSink hot_sink_;
  HotPulls hot_pulls_;
  std::function<bool()> saves_;
  void send_hot_locked();
  ServerStats st_;
};

}  // namespace braid::ps
