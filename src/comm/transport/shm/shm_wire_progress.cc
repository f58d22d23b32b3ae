// Shared-memory wire, progress and waiting: round-robin progress over the
// local peers, and the wait that spins (or yields) on the rings and then
// sleeps on this rank's doorbell.
#include <algorithm>

#include "braid/env.h"
#include "comm/transport/shm/shm_wire.h"

namespace braid::comm::shm {
namespace {

constexpr uint64_t kLivenessEveryNs = 50'000'000;
constexpr uint64_t kSleepSliceNs = 50'000'000;
// How long a rank about to sleep keeps looking after raising its waiting
// flag: far longer than a store takes to leave a core's store buffer (the
// line's trip from the polling peer, well under a microsecond). Should one
// ever take longer, that message waits for the sleep slice to end.
constexpr uint64_t kPublishGraceNs = 5'000;

}  // namespace

bool ShmWire::progress() {
  if (npending_ == 0) return false;
  // Round robin, one slot per peer and direction per turn: the peers'
  // rings drain while ours fill, so neither side stalls on a full ring
  // while the other copies a whole ring's worth. A call returns after
  // ~4 MiB so the caller can post more work.
  size_t total = 0;
  for (;;) {
    size_t round = 0;
    for (Peer& p : peers_local_) {
      const bool sending = !p.sends.empty() || !p.cma_wait.empty();
      if (!sending && p.recvs.empty()) continue;
      size_t pm = 0;
      if (sending) pm += send_some(p, 1);
      if (!p.recvs.empty()) pm += recv_some(p, 1);
      round += pm;
      // A dead peer's last messages are still in the ring: fail only once
      // nothing more can move.
      if (p.dead && pm == 0 && (sending || !p.recvs.empty())) fail_dead(p);
    }
    total += round;
    if (round == 0 || npending_ == 0 || total >= (size_t(4) << 20)) break;
  }
  const bool moved = total > 0;
  // Callers that only spin on progress() still learn of dead peers: look at
  // the clock every 256 idle calls, at the peers every kLivenessEveryNs.
  if (!moved && npending_ > 0 && (++idle_calls_ & 255) == 0 && now_ns() - last_check_ns_ > kLivenessEveryNs) {
    if (check_liveness()) return true;  // let the caller call progress() again
  }
  return moved;
}

void ShmWire::wait_activity(std::chrono::microseconds timeout) {
  // Spin on the rings themselves: no doorbell traffic while both sides are
  // awake. With more ranks than cores, poll between sched_yield() calls
  // instead (shm_wait_plan). Then sleep on the doorbell for the rest of the
  // timeout.
  const uint64_t tmo = uint64_t(std::max<int64_t>(timeout.count(), 0)) * 1000;
  const uint64_t deadline = now_ns() + tmo;
  if (poll_per_plan(wait_, [&] { return ready(); }, tmo)) return;
  for (;;) {
    uint64_t now = now_ns();
    if (now >= deadline) return;
    uint64_t slice = std::min(deadline - now, kSleepSliceNs);
    const uint32_t seen = my_->bell.load(std::memory_order_seq_cst);
    my_->waiting.store(1, std::memory_order_seq_cst);
    // A peer's plain-store publish (ShmWire::publish) that read the flag
    // before we raised it is on its way out of that core's store buffer:
    // look for kPublishGraceNs, not once, before sleeping on it.
    if (spin_until([&] { return ready(); }, kPublishGraceNs)) {
      my_->waiting.store(0, std::memory_order_relaxed);
      return;
    }
    futex_wait(&my_->bell, seen, slice);
    my_->waiting.store(0, std::memory_order_relaxed);
    if (ready()) return;
    if (npending_ > 0 && check_liveness()) return;
  }
}

}  // namespace braid::comm::shm
