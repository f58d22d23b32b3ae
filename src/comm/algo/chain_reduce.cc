// Chain all-reduce through a shared accumulator ("chain"), for communicators
// whose ranks all reach each other over shared memory.
//
// One segment, made by rank 0 in the first call and mapped by every rank
// (HostRing), holds K slots of C bytes. The buffer is cut into chunks of C
// bytes, and chunk k passes through slot (k mod K):
//   rank 0 copies its chunk k into the slot; then rank 1 adds its own chunk
//   k to it, then rank 2, …, rank n−1 (a left fold in rank order, the same
//   bits as the direct algorithm's reduce_many for every dtype but f16 and
//   bf16, which round after each add); then every rank copies the slot into
//   its output. A slot is reused once all n ranks have copied it out.
// Ranks do not go in lock step: each rank adds chunk k+W before it copies
// out chunk k (W = K/2), so a rank only waits when it is K chunks ahead of
// the slowest peer. Rank n−1 completes each chunk, so it copies it out at
// once (W = 0), while the chunk is still in its cache. Each rank sends its
// successor one small message first, so a peer in a different call (or the
// same one with another count, dtype or op) is caught by the message
// signature, as in every other algorithm.
//
// Waits are on counters in the segment, with the shm wire's policy
// (shm_wait_plan): spin briefly, or, when ranks outnumber cores, poll
// between sched_yield() calls for up to BRAID_YIELD_US; then sleep on a futex
// with a deadline; while asleep a rank asks the transport whether a peer has
// exited. A rank that fails marks the segment, and its peers fail with its
// message instead of waiting out their deadlines.
//
// Cost per rank: one read of the input and one write of the output (N
// bytes each) plus N bytes of reduction or copy into the slot, whatever n.
// The model: (n + 1)α + N(β + γ) + (n − 1)·min(N, C)(β + γ) of pipeline
// fill (C the default slot size); when ranks outnumber cores, (n/2 + 1)α +
// N(β + γ) with no fill (see add_chain_reduce for why).
// The ring moves 2(n−1)/n·N bytes per rank through a staging copy on each
// side (≈ 1.5× the chain's memory traffic at 4 ranks, 1.75× at 8) in 2(n−1)
// steps, each of which costs a wake-up when ranks outnumber cores. On 2
// cores at 16 MiB (braid bench, alternating): 4 ranks 6.1–6.6 GB/s busbw
// against the ring's 3.7, 8 ranks 3.1–3.3 against 1.6
// (bench/micro/chain_allreduce.c is the prototype).
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>

#include "braid/env.h"
#include "braid/error.h"
#include "braid/reduce.h"
#include "comm/algo/algorithms.h"
#include "comm/algo/registry.h"
#include "comm/engine/comm_impl.h"
#include "comm/algo/host_ring.h"
#include "comm/algo/chain_segment.h"
#include "comm/transport/shm/shm_object.h"
#include "comm/transport/wire.h"

namespace braid::comm::algo {

using namespace chain;

namespace {

// Counters wrap; they never run 2^31 apart.
bool reached(uint32_t v, uint32_t want) { return int32_t(v - want) >= 0; }

// One call's view of the ring: the waits, with their deadline, liveness
// checks and the peers' failures.
class Chain {
 public:
  Chain(Context& c, HostRing& h, size_t nch)
      : c_(c), h_(h), hd_(header(h)), rk_(ranks(h)),
        slots_(reinterpret_cast<SlotCtl*>(h.base + slots_offset(c.size()))),
        data_(h.base + data_offset(c.size(), h.nslots)), base_(h.chunks_done), nch_(nch) {}

  SlotCtl& slot(size_t k) { return slots_[(base_ + k) % h_.nslots]; }
  uint8_t* slot_data(size_t k) { return data_ + (base_ + k) % h_.nslots * h_.slot_bytes; }
  // How many times slot(k) was used before chunk k, times n.
  uint32_t use_n(size_t k) { return uint32_t((base_ + k) / h_.nslots * uint64_t(c_.size())); }

  // Waits until *w reaches `want`. `who` is the rank this rank waits for
  // (-1: all of them), for the timeout message.
  void wait(SlotCtl& s, std::atomic<uint32_t>& w, uint32_t want, size_t k, const char* what,
            int who) {
    if (poll_per_plan(h_.wait, [&] { return reached(w.load(std::memory_order_acquire), want); }))
      return;
    for (;;) {
      if (reached(w.load(std::memory_order_acquire), want)) return;
      check_abort();
      const uint64_t now = now_ns();
      if (deadline_ == 0) deadline_ = now + c_.timeout_ns();
      if (now > deadline_) timeout(k, what, who);
      if (now >= next_liveness_) {
        check_peers(k);
        next_liveness_ = now + kLivenessEveryNs;
      }
      s.waiters.fetch_add(1, std::memory_order_seq_cst);
      uint32_t v = w.load(std::memory_order_seq_cst);
      if (!reached(v, want)) futex_wait(&w, v, std::min(kSleepSliceNs, deadline_ - now));
      s.waiters.fetch_sub(1, std::memory_order_relaxed);
    }
  }
  void bump(SlotCtl& s, std::atomic<uint32_t>& w) {
    w.fetch_add(1, std::memory_order_seq_cst);
    if (s.waiters.load(std::memory_order_seq_cst) != 0) futex_wake_all(&w);
  }

  // Marks the segment failed with this rank's error and wakes every waiter;
  // the first rank to fail wins, so a rank passing on a peer's failure
  // changes nothing.
  void fail(const Error& e) {
    if (!hd_->abort.mark(c_.rank(), e.code(), e.what())) return;
    for (uint32_t s = 0; s < h_.nslots; ++s) {
      futex_wake_all(&slots_[s].adds);
      futex_wake_all(&slots_[s].reads);
    }
  }
  // Throws this rank's share of a peer's failure, if one is marked.
  void check_abort() {
    hd_->abort.check([&](int rank) { return c_.peer_name(rank); });
  }

 private:
  void check_peers(size_t k) {
    const int p = c_.exited_peer();
    if (p < 0) return;
    throw Error(Errc::kPeerDied, "peer " + c_.peer_name(p) + " " + c_.how_gone(p) + " (chunk " +
                                     std::to_string(k) + " of " + std::to_string(nch_) +
                                     " through shared memory)");
  }
  [[noreturn]] void timeout(size_t k, const char* what, int who) {
    std::string behind;
    for (int p = 0; p < c_.size(); ++p) {
      uint64_t a = rk_[p].added.load() - base_, o = rk_[p].copied.load() - base_;
      if (a >= nch_ && o >= nch_) continue;
      if (!behind.empty()) behind += "; ";
      behind += c_.peer_name(p) + " added " + std::to_string(std::min(a, nch_)) + " and copied out " +
                std::to_string(std::min(o, nch_));
    }
    std::string waiting = who >= 0 ? c_.peer_name(who) : std::string("every rank");
    throw Error(Errc::kTimeout,
                c_.self_name() + ": " + c_.describe() +
                    " timed out; waiting on " + waiting + " to " + what + " chunk " +
                    std::to_string(k) + " of " + std::to_string(nch_) + " (" +
                    std::to_string(h_.slot_bytes) + "-byte chunks through shared memory); " +
                    behind);
  }

  Context& c_;
  HostRing& h_;
  Header* hd_;
  RankCtl* rk_;
  SlotCtl* slots_;
  uint8_t* data_;
  const uint64_t base_;
  const size_t nch_;
  uint64_t deadline_ = 0, next_liveness_ = 0;
};

}  // namespace

void all_reduce_chain(Context& c, HostRing& h, const void* send, void* recv, size_t count,
                      size_t chunk_bytes) {
  const int n = c.size(), r = c.rank();
  const size_t es = c.esize();
  if (n > 1 && h.state == HostRing::State::kUnset) chain_setup(c, h);
  if (n == 1 || h.state != HostRing::State::kReady) {
    all_reduce_ring(c, send, recv, count, chunk_bytes);
    return;
  }
  const size_t per = h.slot_bytes / es;
  const size_t nch = (count + per - 1) / per;
  Chain ch(c, h, nch);
  const ReduceOp op = c.rop() == ReduceOp::kAvg ? ReduceOp::kSum : c.rop();
  const auto* in = static_cast<const uint8_t*>(send);
  auto* out = static_cast<uint8_t*>(recv);
  RankCtl& me = ranks(h)[r];
  try {
    // Hello: the successor checks this call's signature against its own.
    uint64_t mine = h.chunks_done, theirs = 0;
    // A predecessor that failed before its hello left marks the segment
    // instead (and may exit soon after): look there too.
    Request* hs = c.send((r + 1) % n, &mine, sizeof mine, kStepHello);
    Request* hr = c.recv((r + n - 1) % n, &theirs, sizeof theirs, kStepHello);
    for (;;) {
      ch.check_abort();
      if (hs->complete && hr->complete) break;
      if (!c.poll()) c.idle();
    }
    if (theirs != mine)
      throw Error(Errc::kProtocol, "the chain's shared ring is at chunk " +
                                       std::to_string(mine) + " here but at " +
                                       std::to_string(theirs) + " on " +
                                       c.peer_name((r + n - 1) % n));
    // The last rank completes each chunk, so it can copy it out at once,
    // while the chunk is still in its cache; the others run ahead.
    const size_t window = r == n - 1 ? 0 : std::max<size_t>(1, h.nslots / 2);
    size_t nout = 0;
    auto copy_out = [&](size_t k) {
      SlotCtl& s = ch.slot(k);
      ch.wait(s, s.adds, ch.use_n(k) + uint32_t(n), k, "add", n - 1);
      const size_t lo = k * per, len = std::min(per, count - lo);
      std::memcpy(out + lo * es, ch.slot_data(k), len * es);
      me.copied.store(h.chunks_done + k + 1, std::memory_order_relaxed);
      ch.bump(s, s.reads);
    };
    for (size_t k = 0; k < nch; ++k) {
      SlotCtl& s = ch.slot(k);
      const size_t lo = k * per, len = std::min(per, count - lo);
      uint8_t* acc = ch.slot_data(k);
      if (r == 0) {
        ch.wait(s, s.reads, ch.use_n(k), k, "copy out the previous use of", -1);
        std::memcpy(acc, in + lo * es, len * es);
      } else {
        ch.wait(s, s.adds, ch.use_n(k) + uint32_t(r), k, "add", r - 1);
        reduce2(acc, acc, in + lo * es, len, c.dtype(), op);
      }
      if (r == n - 1 && c.rop() == ReduceOp::kAvg) scale_avg(acc, len, c.dtype(), n);
      me.added.store(h.chunks_done + k + 1, std::memory_order_relaxed);
      ch.bump(s, s.adds);
      while (nout + window <= k) copy_out(nout++);
    }
    while (nout < nch) copy_out(nout++);
  } catch (const Error& e) {
    ch.fail(e);  // a no-op when a peer's failure is already marked
    throw;
  }
  h.chunks_done += nch;
}

void add_chain_reduce(Table& t) {
  t.push_back({CollOp::kAllReduce, AlgoId::kChain, "chain",
               "rank-order fold through a shared accumulator: large buffers, every peer on "
               "shared memory",
               [](const Fit& f) -> const char* {
                 return f.all_shm ? nullptr : "needs every peer on shared memory";
               },
               [](const CostInputs& m) {
                 // Pipeline fill: n−1 adds of the first chunk before rank
                 // n−1's, except that ranks outnumbering cores have the
                 // cores work on other ranks' chunks meanwhile. Its n + 1
                 // hand-offs cost n + 1 wake-ups, except that ranks
                 // outnumbering cores wait by yielding, and about half the
                 // hand-offs then find their rank already running: n/2 + 1
                 // (calibrated with `braid bench --algo`; checked by
                 // bench/select_regret.py).
                 const double n = m.n, N = m.N, b = m.b, g = m.g;
                 const double fill =
                     m.oversubscribed ? 0 : (n - 1) * std::min(N, double(kChainSlotBytes)) * (b + g);
                 const double steps = m.oversubscribed ? n / 2 + 1 : n + 1;
                 return steps * m.a + N * (b + g) + fill;
               },
               [](Context& c, const Call& k) {
                 all_reduce_chain(c, k.comm->host_ring(), k.send, k.recv, k.count, k.chunk_bytes);
               }});
}

}  // namespace braid::comm::algo
