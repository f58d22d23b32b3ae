// Context: what an algorithm sees of one collective call.
//
// An algorithm posts sends/receives through the context and waits for them.
// The context stamps every message with the call's signature (so mismatched
// calls are caught by the receiver), enforces the deadline, and turns a stuck
// wait into an error naming the peers not heard from and bytes done.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "braid/dtype.h"
#include "comm/transport/transport.h"

namespace braid::comm {

// Memory a communicator lends its contexts, reused from call to call (one
// operation runs at a time per communicator), so a small collective
// allocates nothing.
// Scratch buffers are kept too: a fresh large allocation per call costs a
// page fault per 4 KiB, which on a VM costs more than the copy it serves.
// Up to kKeepBytes in total stay mapped; beyond, scratch is per call.
struct ContextPool {
  std::deque<Request> reqs;
  std::vector<std::vector<uint8_t>> bufs;
  size_t kept = 0;
  static constexpr size_t kKeepBytes = size_t(512) << 20;
};

// Two calls that the ranks made with the same sequence number but
// different arguments.
struct Disagreement {
  int peer;
  MsgSig ours, theirs;
};

// Told when a call has waited for a long time (Context::kStallNs, then every
// kStallEveryNs): finds calls on which this rank and the peers it waits on
// disagree, where no message header could show it (comm/engine/desync.h).
class StallWatch {
 public:
  virtual ~StallWatch() = default;
  virtual std::optional<Disagreement> stalled(const MsgSig& call,
                                              const std::vector<int>& waiting_on) = 0;
};

class Context {
 public:
  // How long a call waits before its StallWatch looks, and how often after.
  static constexpr uint64_t kStallNs = 100'000'000;
  static constexpr uint64_t kStallEveryNs = 200'000'000;

  // `describe` renders the call for error messages; it is only invoked when
  // something fails, so the fast path formats nothing.
  // The deadline is `timeout_ns` after the first time the call has to wait
  // (reading the clock costs tens of ns under a hypervisor; a call that
  // never waits never reads it).
  Context(Transport& tp, int rank, int size, const MsgSig& call, uint64_t timeout_ns,
          std::function<std::string()> describe, ContextPool& pool);

  int rank() const { return rank_; }
  int size() const { return size_; }
  // "rank R", or "rank R (world rank W)" in a sub-communicator.
  std::string self_name() const { return tp_.describe_self(); }
  // Ring order (topology-aware): position p of the ring holds rank ring_at(p).
  // Identity unless set_ring was called.
  void set_ring(const std::vector<int>* ring);
  // Consulted when a wait lasts (may be null: no one to ask).
  void set_stall_watch(StallWatch* w) { watch_ = w; }
  int ring_at(int pos) const { return ring_ ? (*ring_)[size_t(pos)] : pos; }
  int ring_pos() const { return ring_pos_; }
  DType dtype() const { return call_.dtype; }
  ReduceOp rop() const { return call_.rop; }
  size_t esize() const { return dtype_size(call_.dtype); }
  // For algorithms that wait on something other than messages (the chain
  // all-reduce's shared counters): the call as error messages name it, the
  // timeout, the peers, and a peer known to have exited (-1: none).
  std::string describe() const { return describe_(); }
  uint64_t timeout_ns() const { return timeout_ns_; }
  std::string peer_name(int peer) const { return tp_.describe_peer(peer); }
  int exited_peer() { return tp_.exited_peer(); }
  std::string how_gone(int peer) const { return tp_.how_gone(peer); }
  // The cores the ranks of this rank's host may use between them.
  int host_cores() const { return tp_.cores_of(rank_); }

  // Post one message. The returned pointer stays valid for the life of the
  // context; poll it with done() or wait with wait()/wait_all().
  // copy_to: also copy the payload there (Request::copy_to).
  Request* send(int peer, const void* buf, size_t bytes, uint32_t step = 0,
                void* copy_to = nullptr);
  Request* recv(int peer, void* buf, size_t bytes, uint32_t step = 0);
  // A receive into memory this call does not read again. If the call's
  // output (out_bytes, on this rank) is large, the wire writes it past the
  // cache (Request::stream_dst, stream_out()); else a plain recv.
  Request* recv_final(int peer, void* buf, size_t bytes, size_t out_bytes, uint32_t step = 0);
  // copy_if_distinct, told to the transport (the simulator times it).
  void copy(void* dst, const void* src, size_t bytes);
  // dst = acc op incoming, `count` elements of the call's dtype and op (avg
  // reduces as sum).
  Request* recv_reduce(int peer, void* dst, const void* acc, size_t count, uint32_t step = 0);

  // Drives the transport until r completes (or the deadline passes).
  void wait(Request* r);
  // Waits for every request posted so far.
  void wait_all();
  // One round of progress; true if anything moved. Use with done() for
  // event-driven schedules; pair with idle() when nothing moved.
  bool poll();
  void idle();  // blocks briefly for activity, checking the deadline

  // Scratch memory for this call, valid until the context ends: taken from
  // the communicator's ContextPool, whose buffers later calls reuse (within
  // kKeepBytes; a request past that budget is allocated for this call only).
  void* scratch(size_t bytes);

 private:
  [[noreturn]] void timeout_error();
  // Asks the StallWatch about the peers of the open requests; throws
  // Error(kMismatch) if it finds a disagreement.
  void check_stall();
  Request* post(Request::Kind kind, int peer, size_t bytes, uint32_t step);

  Transport& tp_;
  int rank_, size_;
  const std::vector<int>* ring_ = nullptr;
  int ring_pos_ = 0;
  MsgSig call_;
  uint64_t timeout_ns_;
  uint64_t deadline_ = 0;
  StallWatch* watch_ = nullptr;
  uint64_t next_watch_ = 0;
  std::function<std::string()> describe_;
  ContextPool& pool_;
  std::deque<Request>& reqs_;
  size_t first_open_ = 0;
  size_t bufs_used_ = 0;
  unsigned spins_ = 0;
  std::vector<std::vector<uint8_t>> large_;
};

// Splits `count` elements into `parts` nearly equal blocks; block i covers
// [offset(i), offset(i+1)).
inline size_t block_offset(size_t count, int parts, int i) {
  size_t base = count / size_t(parts), extra = count % size_t(parts);
  return size_t(i) * base + std::min(size_t(i), extra);
}

// Chunks of at most `chunk_bytes` (at least one element each) that cover
// `count` elements of `esize` bytes; at least one.
inline int chunk_count(size_t count, size_t esize, size_t chunk_bytes) {
  size_t per = std::max<size_t>(1, chunk_bytes / esize);
  return int(std::max<size_t>(1, (count + per - 1) / per));
}

// Drives the transport until every request of `rq` has completed, calling
// on_complete(i) for request i as soon as requests 0..i all have. For
// pipelined schedules whose receives from one peer complete in posting
// order, so that one cursor tracks them and each arrival is forwarded at
// once.
template <class OnComplete>
void complete_in_order(Context& c, const std::vector<Request*>& rq, OnComplete&& on_complete) {
  for (size_t i = 0; i < rq.size();) {
    if (!rq[i]->complete) {
      if (!c.poll()) c.idle();
      continue;
    }
    on_complete(i);
    ++i;
  }
}

}  // namespace braid::comm
