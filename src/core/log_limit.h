// LogLimiter: a rate limit for log lines that strangers can cause (a
// server dropping connections that fail its handshake), so that a flood of
// them costs a bounded log, not a line each. Private to src/.
//
// allow() says whether to log this event: the first `burst` events of each
// `period` are logged; the rest are counted, and the next logged event
// learns (through *suppressed) how many were left out since. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace braid {

class LogLimiter {
 public:
  explicit LogLimiter(int burst = 10, std::chrono::seconds period = std::chrono::seconds(10))
      : burst_(burst), period_(period) {}
  bool allow(uint64_t* suppressed) {
    std::lock_guard<std::mutex> l(mu_);
    const auto now = std::chrono::steady_clock::now();
    if (now - start_ >= period_) {
      start_ = now;
      used_ = 0;
    }
    if (used_ >= burst_) {
      ++dropped_;
      return false;
    }
    ++used_;
    *suppressed = dropped_;
    dropped_ = 0;
    return true;
  }
  // " (and N more not logged)" for a logged line's end; "" for N = 0.
  static std::string note(uint64_t suppressed) {
    return suppressed ? " (and " + std::to_string(suppressed) + " more not logged)" : "";
  }

 private:
  std::mutex mu_;
  const int burst_;
  const std::chrono::seconds period_;
  std::chrono::steady_clock::time_point start_{};
  int used_ = 0;
  uint64_t dropped_ = 0;
};

}  // namespace braid
