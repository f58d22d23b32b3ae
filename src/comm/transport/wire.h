// Internal pieces shared by the wires under the composite Transport
// (transport.cc routes each peer to one wire: self, shm or tcp).
#pragma once

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <ctime>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "braid/env.h"
#include "comm/transport/transport.h"

namespace braid::comm {

// What set-up learns about every rank through the store.
struct PeerInfo {
  int rank = -1;
  int pid = 0;
  std::string host;     // hostname, for messages
  std::string host_id;  // hostname + boot id + ipc/pid namespaces: equal => shm possible
  uint64_t nonce = 0;   // random per rank and communicator
  std::string cpus;     // the CPUs it may run on (sched_getaffinity), hex, lowest CPU last
  int world_rank = -1;  // its rank in the communicator this one was split from (at the top)
};

// The CPUs the ranks on `host_id` may run on between them: the union of
// their affinity masks. A launcher that pins each rank to its own core
// (mpirun -n 2 does) gives every rank a mask of one, but the host still has
// a core per rank.
int host_cores(const std::vector<PeerInfo>& peers, const std::string& host_id);
// This process's affinity mask as PeerInfo::cpus spells it.
std::string affinity_hex();

// "rank 3 (pid 1234 on host h)"; in a sub-communicator
// "rank 1 (world rank 3, pid 1234 on host h)".
std::string describe_peer_info(const PeerInfo& p);

// What a wire's set-up needs.
struct WireContext {
  int rank = 0;
  int size = 0;
  Store* store = nullptr;
  const TransportOptions* opt = nullptr;
  std::vector<PeerInfo> peers;  // indexed by rank
  std::string token;            // unique per communicator (hex)
  int host_cores = 1;           // host_cores() of this rank's host
  uint64_t deadline_ns = 0;     // set-up deadline (now_ns clock)

  int64_t ms_left() const;
};

// A Transport for a subset of the peers, plus what the composite needs to
// wait on several wires at once.
class Wire : public Transport {
 public:
  // True while any posted request is not complete.
  virtual bool busy() const = 0;
  // Non-blocking: true if something may have changed since the last
  // progress() (used when the composite waits on several wires).
  virtual bool poll_ready() = 0;
  // True if the wire performs a send's copy_to itself (see Request).
  virtual bool fuses_copy() const { return false; }
  std::string kind_to(int) const override = 0;
  std::string describe_peer(int peer) const override;

 protected:
  explicit Wire(const WireContext& ctx) : rank_(ctx.rank), peers_(ctx.peers) {}
  // "rank R", or "rank R (world rank W)" in a sub-communicator.
  std::string describe_self() const override;
  // Error(kMismatch) with both sides' descriptions.
  [[noreturn]] void throw_mismatch(const Request& r, const MsgSig& got, const char* wire) const;
  // Error(kPeerDied) naming the peer and what was pending.
  [[noreturn]] void throw_peer_died(int peer, const Request* pending, const std::string& how) const;
  // Error(kProtocol): a frame that breaks the wire format.
  [[noreturn]] void throw_protocol(int peer, const std::string& what) const;

  int rank_;
  std::vector<PeerInfo> peers_;
};

// FIFO of caller-owned requests; grows by doubling, never allocates in the
// steady state.
class ReqQueue {
 public:
  bool empty() const { return head_ == tail_; }
  size_t size() const { return tail_ - head_; }
  Request* front() const { return buf_[head_ & (buf_.size() - 1)]; }
  void pop() { ++head_; }
  void push(Request* r) {
    if (buf_.empty() || tail_ - head_ == buf_.size()) grow();
    buf_[tail_++ & (buf_.size() - 1)] = r;
  }

 private:
  void grow() {
    std::vector<Request*> nb(buf_.empty() ? 16 : buf_.size() * 2);
    size_t n = tail_ - head_;
    for (size_t i = 0; i < n; ++i) nb[i] = buf_[(head_ + i) & (buf_.size() - 1)];
    buf_.swap(nb);
    head_ = 0;
    tail_ = n;
  }
  std::vector<Request*> buf_;
  size_t head_ = 0, tail_ = 0;
};

// How long wait_activity spins before yielding the core: BRAID_SPIN_US, by
// default longer when every local rank can have its own core (`cores`: the
// host's, WireContext::host_cores).
uint64_t spin_ns_for(int local_ranks, int cores);
// How a shared-memory wait spends its time before it sleeps on the futex:
// it spins for spin_ns, then polls between sched_yield() calls for yield_ns.
// yield_ns is BRAID_YIELD_US, by default 200 µs when the host has more local
// ranks than cores, else 0: the peer a waiting rank needs is then often
// queued on the same core, and yielding hands it the core at once, where a
// futex sleep pays a wake-up (a syscall by the peer, then the scheduler) per
// message. A wait that yields does not spin first, unless BRAID_SPIN_US
// asks for it; otherwise spin_ns is spin_ns_for().
struct ShmWaitPlan {
  uint64_t spin_ns = 0, yield_ns = 0;
};
ShmWaitPlan shm_wait_plan(int local_ranks, int cores);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// How often a spinning wait offers its core (sched_yield) to another task
// queued on it. A host with a core per rank can still put two ranks on one
// core, when something else keeps the other core busy; the rank being
// waited for then runs only when the spinner stops. Without these yields a
// 2-rank 8-byte all_reduce took 216 µs beside a busy loop pinned to the
// other core, once per spin (BRAID_SPIN_US, 200 µs).
// A yield that kept this thread off its core for longer than
// kSpinYieldTakenNs means another task wanted the core; spins then yield
// after every batch of polls until kSpinSharedForNs later, from the first
// poll of each wait on. That brought the 216 µs above to 10.7-11.4 µs,
// where yielding every 10 µs alone gave 21.0-21.6 µs.
constexpr uint64_t kSpinYieldEveryNs = 10'000;
constexpr uint64_t kSpinYieldTakenNs = 3'000;
constexpr uint64_t kSpinSharedForNs = 20'000'000;
inline thread_local uint64_t spin_core_shared_until = 0;

// The spinning part of a wait: true as soon as ready() holds, false once
// about spin_ns have passed without it. The clock (~40 ns under a
// hypervisor) is read only every 64 polls, and not at all when the answer
// comes quickly. Every kSpinYieldEveryNs it yields the core, which costs a
// system call when no other task wants it.
template <class F>
bool spin_until(F&& ready, uint64_t spin_ns) {
  for (int i = 0; i < 64; ++i) {
    if (ready()) return true;
    cpu_relax();
  }
  const uint64_t t0 = now_ns();
  uint64_t next_yield = t0 < spin_core_shared_until ? 0 : kSpinYieldEveryNs;
  for (uint64_t t = 0; t < spin_ns; t = now_ns() - t0) {
    for (int i = 0; i < 64; ++i) {
      if (ready()) return true;
      cpu_relax();
    }
    if (t >= next_yield) {
      ::sched_yield();
      const uint64_t back = now_ns();
      if (back - t0 - t > kSpinYieldTakenNs) spin_core_shared_until = back + kSpinSharedForNs;
      next_yield = back < spin_core_shared_until ? 0 : t + kSpinYieldEveryNs;
    }
  }
  return false;
}

// The yielding part of a wait, for ranks that outnumber the cores (see
// shm_wait_plan): polls ready() between sched_yield() calls, which hands
// the core to a runnable peer (often the one being waited for), until it
// holds (true) or yield_ns have passed (false). The clock is read every 8
// polls: it costs more than a look.
template <class F>
bool yield_until(F&& ready, uint64_t yield_ns) {
  const uint64_t t0 = now_ns();
  while (now_ns() - t0 < yield_ns) {
    for (int i = 0; i < 8; ++i) {
      if (ready()) return true;
      ::sched_yield();
    }
  }
  return false;
}

// The polling phases of a shared-memory wait, as the plan says, within
// max_ns: spin, then yield. True as soon as ready() holds; false when the
// caller should sleep.
template <class F>
bool poll_per_plan(const ShmWaitPlan& w, F&& ready, uint64_t max_ns = ~uint64_t(0)) {
  const uint64_t spin = std::min(w.spin_ns, max_ns);
  if (spin > 0 && spin_until(ready, spin)) return true;
  const uint64_t yield = std::min(w.yield_ns, max_ns - spin);
  return yield > 0 && yield_until(ready, yield);
}

// FUTEX_WAIT (for at most ns, while *w == seen) and FUTEX_WAKE of every
// waiter, on a 32-bit word shared between processes when it lies in shared
// memory.
inline void futex_wait(std::atomic<uint32_t>* w, uint32_t seen, uint64_t ns) {
  const timespec ts{time_t(ns / 1'000'000'000), long(ns % 1'000'000'000)};
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(w), FUTEX_WAIT, seen, &ts, nullptr, 0);
}
inline void futex_wake_all(std::atomic<uint32_t>* w) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(w), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace braid::comm
