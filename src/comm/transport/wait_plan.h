// How a wait spends its time before it sleeps: spin, then (when ranks
// outnumber cores) poll between sched_yield() calls, then a futex or epoll
// sleep. Used by the wires' wait_activity and by waits outside the
// transport on shared counters (the chain all-reduce).
#pragma once

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <ctime>

#include "braid/env.h"

namespace braid::comm {

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
// waited for then runs only when the spinner stops, so without these
// yields a small collective would take a whole spin (BRAID_SPIN_US) per
// message.
// A yield that kept this thread off its core for longer than
// kSpinYieldTakenNs means another task wanted the core; spins then yield
// after every batch of polls until kSpinSharedForNs later, from the first
// poll of each wait on: while the core is shared, the peer gets it as soon
// as this rank has looked once, not a kSpinYieldEveryNs later.
constexpr uint64_t kSpinYieldEveryNs = 10'000;
constexpr uint64_t kSpinYieldTakenNs = 3'000;
constexpr uint64_t kSpinSharedForNs = 20'000'000;
inline thread_local uint64_t spin_core_shared_until = 0;

// The spinning part of a wait: true as soon as ready() holds, false once
// about spin_ns have passed without it. The clock (slow under a hypervisor)
// is read only every 64 polls, and not at all when the answer comes
// quickly. Every kSpinYieldEveryNs it yields the core, which costs a
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
