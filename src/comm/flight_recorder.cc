#include "comm/flight_recorder.h"

#include <cstdio>
#include <sstream>

#include "braid/env.h"

namespace braid::comm {

uint64_t FlightRecorder::record(const MsgSig& sig) {
  std::lock_guard<std::mutex> l(mu_);
  uint64_t id = next_++;
  Entry& e = ring_[id % ring_.size()];
  e = Entry{};
  e.sig = sig;
  e.t_queued = now_ns();
  return id;
}

void FlightRecorder::start(uint64_t id, const std::string& algo) {
  std::lock_guard<std::mutex> l(mu_);
  if (id + ring_.size() < next_) return;  // overwritten already
  Entry& e = ring_[id % ring_.size()];
  e.state = State::kRunning;
  e.algo = algo;
  e.t_start = now_ns();
}

void FlightRecorder::finish(uint64_t id, bool ok) {
  std::lock_guard<std::mutex> l(mu_);
  if (id + ring_.size() < next_) return;
  Entry& e = ring_[id % ring_.size()];
  e.state = ok ? State::kDone : State::kFailed;
  e.t_end = now_ns();
}

std::string FlightRecorder::dump(const std::string& header) const {
  static const char* states[] = {"queued", "running", "done", "FAILED"};
  std::lock_guard<std::mutex> l(mu_);
  std::ostringstream os;
  os << header << " — last " << std::min<uint64_t>(next_, ring_.size()) << " operations:\n";
  uint64_t now = now_ns();
  uint64_t first = next_ > ring_.size() ? next_ - ring_.size() : 0;
  for (uint64_t id = first; id < next_; ++id) {
    const Entry& e = ring_[id % ring_.size()];
    char line[320];
    double run_us = e.t_start ? double((e.t_end ? e.t_end : now) - e.t_start) / 1e3 : 0.0;
    std::snprintf(line, sizeof line, "  seq %-6llu %-14s %-5s count %-10llu %-4s %s %-6s %-8s %10.1f us%s\n",
                  (unsigned long long)e.sig.seq, coll_op_name(e.sig.op), dtype_name(e.sig.dtype),
                  (unsigned long long)e.sig.count, reduce_op_name(e.sig.rop),
                  e.sig.root >= 0 ? ("root/peer " + std::to_string(e.sig.root)).c_str() : "",
                  e.algo.c_str(), states[int(e.state)], run_us,
                  e.state == State::kRunning ? "  <- in progress" : "");
    os << line;
  }
  return os.str();
}

}  // namespace braid::comm
