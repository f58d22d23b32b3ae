// An emulated wire: delay and loss between two network namespaces, done in
// user space for kernels without the netem queueing discipline (this
// machine's has none: `tc qdisc add ... netem` says "Specified qdisc kind is
// unknown"). It does what `tc qdisc add dev X root netem delay D loss P` on
// both ends of a link does: every Ethernet frame, each way, is held for D
// and dropped with probability P, in order, with a bounded queue.
//
// Two TAP devices stand for the link's two ends, one made inside each
// namespace (a test host's eth0, and its port on the switch's bridge); a
// thread of the test process reads the frames each end sends and writes
// them, D later, into the other. The drops come from a seeded generator, so
// a run drops the same frame numbers each time (which frames those are
// depends on the traffic's timing). The devices go when the wire is
// destroyed (their descriptors close), so nothing outlives a test.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace braid::testing {

struct WireFaults {
  std::chrono::microseconds delay{0};  // added to every frame, each way
  double loss = 0;                     // chance that a frame is dropped, each way
  uint64_t seed = 1;                   // of the drop generator
  size_t queue_frames = 10000;         // frames held per direction; beyond, dropped
};

struct WireStats {
  uint64_t frames = 0;   // frames sent into the wire, both ways
  uint64_t dropped = 0;  // of those, dropped by the loss draw
  uint64_t overflow = 0; // dropped because the queue was full or the far end down
  uint64_t bytes = 0;    // delivered
};

class EmulatedWire {
 public:
  // Makes TAP device `a_name` in the network namespace of process `a_pid`
  // and `b_name` in that of `b_pid` (both down, no address: the caller
  // configures them with `ip`), and starts carrying frames between them.
  // Throws std::runtime_error naming what failed.
  EmulatedWire(pid_t a_pid, const std::string& a_name, pid_t b_pid, const std::string& b_name,
               WireFaults faults);
  ~EmulatedWire();
  EmulatedWire(const EmulatedWire&) = delete;

  // New faults from the next frame on (frames already held keep their time).
  void set_faults(const WireFaults& faults);
  WireStats stats() const;

 private:
  void open_ends(pid_t a_pid, const std::string& a_name, pid_t b_pid, const std::string& b_name);
  void carry();

  int fd_[2] = {-1, -1};  // the TAP ends
  int stop_fd_ = -1;      // an eventfd that wakes the thread to stop
  mutable std::mutex mu_;
  WireFaults faults_;
  uint64_t rng_ = 0;
  std::atomic<uint64_t> frames_{0}, dropped_{0}, overflow_{0}, bytes_{0};
  std::thread thread_;
};

}  // namespace braid::testing
