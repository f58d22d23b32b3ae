// Flight recorder: the last operations of one communicator, for post-mortems.
// Printed on timeout or error, on SIGUSR1, and by Communicator::flight_record.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "comm/transport.h"

namespace braid::comm {

class FlightRecorder {
 public:
  enum class State : uint8_t { kQueued, kRunning, kDone, kFailed };
  struct Entry {
    MsgSig sig;
    std::string algo;
    State state = State::kQueued;
    uint64_t t_queued = 0, t_start = 0, t_end = 0;  // ns, monotonic
  };

  explicit FlightRecorder(size_t capacity = 64) : ring_(capacity) {}
  // Returns a slot id for later updates.
  uint64_t record(const MsgSig& sig);
  void start(uint64_t id, const std::string& algo);
  void finish(uint64_t id, bool ok);
  std::string dump(const std::string& header) const;

 private:
  mutable std::mutex mu_;
  std::vector<Entry> ring_;
  uint64_t next_ = 0;
};

}  // namespace braid::comm
