// The abort protocol of braid's shared-memory structures: one AbortMark in
// a segment that several processes map, set by a rank whose communicator
// failed, so that peers waiting on that segment (spinning or asleep on a
// futex in it) stop with the failing rank's message instead of waiting out
// their deadlines. The shm wire has one per rank's segment (SegHeader),
// set by its owner; the chain all-reduce has one for the whole ring
// (chain::Header), set by the first rank of all to fail.
//
// Invariants:
// - First writer wins: mark() claims the mark with a compare-exchange on
//   `state` (kClear → kWriting); exactly one call ever succeeds, the others
//   return false and write nothing. A mark is never cleared: the segment's
//   life is the communicator's, and a failed communicator stays failed.
// - The message is never torn: the winner writes rank, code and message
//   while `state` is kWriting, then publishes them with a release store of
//   kSet; readers look at them only after an acquire load that sees kSet,
//   and nothing writes them again. A reader that sees kWriting treats the
//   mark as not yet set (the winner is mid-copy) and sees it on a later
//   look; waiters look again on every wake-up.
// - Zeroed memory is a clear mark, so a segment fresh from ftruncate (or a
//   value-initialised header) needs no set-up; the atomic must be lock-free
//   to work across processes.
// - Whoever sets the mark wakes the waiters: the mark has no futex of its
//   own, since what waiters sleep on differs (the wire's doorbell, the
//   chain's slot counters).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "braid/error.h"

namespace braid::comm::shm {

// What a set mark says.
struct AbortNote {
  int rank;         // the rank that set it
  Errc code;        // the code its peers fail with
  std::string msg;  // its message, cut to AbortMark::kMsgBytes − 1 bytes
};

struct alignas(64) AbortMark {
  static constexpr size_t kMsgBytes = 500;
  enum : uint32_t { kClear = 0, kWriting = 1, kSet = 2 };

  std::atomic<uint32_t> state;
  int32_t rank;
  int32_t code;
  char msg[kMsgBytes];

  // Sets the mark unless some rank already has; true if this call did.
  bool mark(int by_rank, Errc why_code, std::string_view why) noexcept;
  // True once any rank has begun to set the mark (its note may still be
  // being written): for a failed segment's clean-up, not for reading.
  bool claimed() const noexcept { return state.load(std::memory_order_acquire) != kClear; }
  // The note once the mark is set, else nothing.
  std::optional<AbortNote> read() const;
  // Throws Error(code, "stopped, because <name_of(rank)> failed: <msg>")
  // once the mark is set; returns otherwise.
  template <class NameOf>
  void check(NameOf&& name_of) const {
    if (std::optional<AbortNote> n = read())
      throw Error(n->code, "stopped, because " + std::string(name_of(n->rank)) + " failed: " + n->msg);
  }
};
static_assert(sizeof(AbortMark) == 512, "a whole number of cache lines");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "shared across processes");

}  // namespace braid::comm::shm
