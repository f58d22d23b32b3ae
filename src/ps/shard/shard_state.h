// One server's replica of a shard: the parts below composed behind one
// mutex, and the frames that run on them. Knows frames (io/wire.h) but not
// sockets: the server's connection threads validate a frame's shape here,
// read its payload, then hand it over; a pull that must wait for a round
// parks on the condition variable with the frame's deadline. Private to
// src/ps.
//
// The parts, each a class of its own with its invariants:
//   ParamStore   shard/param_store.h         keys, optimizer state, update rule
//   Rounds       consistency/rounds.h        rounds, clocks, BSP/ASP/SSP/k-of-n
//   Roster       shard/roster.h              workers attached, finished, lost
//   WriteDedup   replication/write_dedup.h   each worker's last applied write
//   Reports      shard/reports.h             the workers' training-log sums
//   HotOwner     hot/hot_owner.h             pull counts and the hot set
// and checkpoints and state transfers are free functions over them
// (checkpoint/shard_checkpoint.h).
//
// Locking: one mutex, mu_, guards every part. A frame touches several at
// once (a clock closes a round, which applies to the store, picks hot rows,
// wakes pulls and may save; a pull waits on the rounds and reads the store;
// a goodbye wakes waits that read the roster), so finer locks would only
// be taken together. Outside it: the traffic counters, the chain epoch and
// the replica-pull count (atomics, counted per frame), and a batch's hot
// pulls (run with mu_ released; they take the hot replicas' own lock).
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "braid/ps.h"
#include "ps/consistency/rounds.h"
#include "ps/hot/hot_owner.h"
#include "ps/io/reply_buf.h"
#include "ps/io/wire.h"
#include "ps/replication/write_dedup.h"
#include "ps/shard/param_store.h"
#include "ps/shard/reports.h"
#include "ps/shard/roster.h"

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

  // Connection bookkeeping (Roster): hello takes a worker id, a closed
  // connection gives it back; `gone`: the worker's end closed.
  void attach(int w);
  void detach(int w, bool gone);
  // Lost workers (server/server_lost.cc judges them): the workers dropped
  // at or before `before_ns` (now_ns's clock), with the clock each had
  // reached here.
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
  void set_epoch(uint32_t e) { epoch_ = e; }  // the chain epoch reported in stats
  ServerStats stats() const;
  void count_traffic(uint64_t in, uint64_t out, bool rejected);
  // Every worker said goodbye and each goodbye's reply has gone out (or
  // failed): a server's owner may then close its connections without
  // cutting off a reply a worker still waits for.
  void wait_finished(std::chrono::milliseconds timeout);
  // Around one goodbye frame, from before it is handled until its reply is
  // sent (or the connection failed): wait_finished waits for the reply.
  void bye_begin();
  void bye_end();

  // Hot keys (hot/hot_owner.h): `sink` gets each refresh. hot_set fills a
  // kHotSet reply.
  using HotSink = HotOwner::Sink;
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
  void count_replica_pulls(int64_t rows) { pulls_replica_ += rows; }

  // Checkpoints (checkpoint/shard_checkpoint.h): at a round close when due,
  // by this replica when `saves` (if set) says so; the constructor resumes
  // from ServerOptions::resume_from.
  void set_saves(std::function<bool()> saves) { saves_ = std::move(saves); }

  // State transfer to a server joining the shard's chain
  // (replication/chain_join.h): the checkpoint plus the live state, written
  // to `path` under the mutex by transfer_out and installed by transfer_in
  // (checkpoint/shard_transfer.cc), which returns how many open (buffered,
  // not yet closed) rounds the installed state holds.
  void transfer_out(const std::string& path) const;
  int64_t transfer_in(const std::string& path);

 private:
  std::string where(const wire::Header& h) const;
  // handle's body for one non-batch frame, under mu_; APPENDS its reply
  // payload to `out` and sets reply.payload to that payload's length.
  void handle_locked(const wire::Header& h, const uint8_t* payload, wire::Header& reply,
                     ReplyBuf& out, std::unique_lock<std::mutex>& lk, int64_t deadline_ns);
  // kBatch (shard_batch.cc): the payload bound checked before it is read,
  // and the run of its sub-frames.
  uint64_t batch_payload(const wire::Header& h, int w) const;
  void handle_batch(const wire::Header& h, const uint8_t* payload, ReplyBuf& out,
                    std::unique_lock<std::mutex>& lk, int64_t deadline_ns);
  void pull(const wire::Header& h, const uint8_t* payload, wire::Header& reply,
            ReplyBuf& out, std::unique_lock<std::mutex>& lk, int64_t deadline_ns);
  void stats_frame(const wire::Header& h, ReplyBuf& out, std::unique_lock<std::mutex>& lk,
                   int64_t deadline_ns);
  void round_closed();  // Rounds' on_close: hot refresh, wake the pulls, save
  ServerStats snapshot_locked() const;
  void wait_until(std::unique_lock<std::mutex>& lk, int64_t deadline_ns,
                  const std::function<bool()>& ready,
                  const std::function<std::string()>& what);  // built only on failure

  const ServerOptions opt_;
  const int W_;

  mutable std::mutex mu_;  // guards everything below but the atomics
  std::condition_variable cv_;
  // wait_finished's own: woken by a bye, not by every round close.
  std::condition_variable finished_cv_;
  int byes_in_flight_ = 0;  // between bye_begin and bye_end
  ParamStore store_;
  Rounds rounds_;
  Roster roster_;
  WriteDedup dedup_;
  Reports reports_;
  std::unique_ptr<HotOwner> hot_;  // set when opt_.hot_keys
  HotPulls hot_pulls_;
  std::function<bool()> saves_;
  int64_t pulls_owner_ = 0;

  std::atomic<int64_t> requests_{0}, bytes_in_{0}, bytes_out_{0}, rejected_{0};
  std::atomic<int64_t> epoch_{0}, pulls_replica_{0};
};

}  // namespace braid::ps
