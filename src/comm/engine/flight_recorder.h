// Flight recorder: the last operations of one communicator, for post-mortems.
// Printed on timeout or error, on SIGUSR1, and by Communicator::flight_record.
//
// Recording is on the hot path of every collective, so it takes no lock and
// reads no system clock: entries are written by the issuing/executing thread
// with relaxed atomics and time-stamped with the CPU's time-stamp counter,
// converted to microseconds only when dumped. A dump taken while operations
// run may show an entry mid-update; it is a diagnostic, never a source of
// truth for the algorithms.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/algo/registry.h"
#include "comm/transport/transport.h"

namespace braid::comm {

class FlightRecorder {
 public:
  enum class State : uint8_t { kQueued, kRunning, kDone, kFailed };

  // `capacity` is rounded up to a power of two (slots are found by a mask,
  // not a division: this runs three times per collective).
  explicit FlightRecorder(size_t capacity = 64);
  // Returns a slot id for later updates. Called only by the thread that
  // issues the communicator's operations (one at a time, as for every
  // collective), so the counter is bumped without a locked instruction.
  uint64_t record(const MsgSig& sig);
  void start(uint64_t id, const algo::Algorithm& a);
  // A receive's sequence number, known once it is posted (CommImpl::run_p2p_group).
  void set_seq(uint64_t id, uint64_t seq) { at(id).seq.store(seq, std::memory_order_relaxed); }
  void finish(uint64_t id, bool ok);
  std::string dump(const std::string& header) const;
  // The algorithm of the newest operation that has started ("" if none).
  std::string last_algo() const;

 private:
  struct Entry {
    std::atomic<uint64_t> seq{0}, count{0};
    std::atomic<int32_t> root{-1};
    std::atomic<uint8_t> op{0}, dtype{0}, rop{0}, state{0};
    std::atomic<uint64_t> t_start{0}, t_end{0};  // TSC ticks
    // A registry entry (which lives as long as the process); null until
    // the operation starts.
    std::atomic<const algo::Algorithm*> algo{nullptr};
  };
  Entry& at(uint64_t id) { return ring_[id & mask_]; }

  std::vector<Entry> ring_;
  uint64_t mask_;
  std::atomic<uint64_t> next_{0};
  uint64_t tsc0_, ns0_;  // for converting ticks at dump time
};

}  // namespace braid::comm
