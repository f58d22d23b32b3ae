#include "comm/engine/flight_recorder.h"

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "braid/env.h"

namespace braid::comm {
namespace {
#if defined(__x86_64__) || defined(__i386__)
inline uint64_t ticks() { return __rdtsc(); }
#else
inline uint64_t ticks() { return now_ns(); }
#endif
}  // namespace

FlightRecorder::FlightRecorder(size_t capacity)
    : ring_(std::bit_ceil(std::max<size_t>(capacity, 1))),
      mask_(ring_.size() - 1),
      tsc0_(ticks()),
      ns0_(now_ns()) {}

uint64_t FlightRecorder::record(const MsgSig& sig) {
  const uint64_t id = next_.load(std::memory_order_relaxed);
  next_.store(id + 1, std::memory_order_release);
  Entry& e = at(id);
  e.state.store(uint8_t(State::kQueued), std::memory_order_relaxed);
  e.seq.store(sig.seq, std::memory_order_relaxed);
  e.count.store(sig.count, std::memory_order_relaxed);
  e.root.store(sig.root, std::memory_order_relaxed);
  e.op.store(uint8_t(sig.op), std::memory_order_relaxed);
  e.dtype.store(uint8_t(sig.dtype), std::memory_order_relaxed);
  e.rop.store(uint8_t(sig.rop), std::memory_order_relaxed);
  e.algo.store(nullptr, std::memory_order_relaxed);
  e.t_start.store(0, std::memory_order_relaxed);
  e.t_end.store(0, std::memory_order_relaxed);
  return id;
}

void FlightRecorder::start(uint64_t id, const algo::Algorithm& a) {
  Entry& e = at(id);
  e.algo.store(&a, std::memory_order_relaxed);
  e.t_start.store(ticks(), std::memory_order_relaxed);
  e.state.store(uint8_t(State::kRunning), std::memory_order_release);
}

void FlightRecorder::finish(uint64_t id, bool ok) {
  Entry& e = at(id);
  e.t_end.store(ticks(), std::memory_order_relaxed);
  e.state.store(uint8_t(ok ? State::kDone : State::kFailed), std::memory_order_release);
}

std::string FlightRecorder::last_algo() const {
  const uint64_t next = next_.load(std::memory_order_acquire);
  if (next == 0) return "";
  const Entry& e = ring_[(next - 1) & mask_];
  const algo::Algorithm* a = e.algo.load(std::memory_order_relaxed);
  return a ? a->name : "";
}

std::string FlightRecorder::dump(const std::string& header) const {
  static const char* states[] = {"queued", "running", "done", "FAILED"};
  const uint64_t next = next_.load(std::memory_order_acquire);
  const uint64_t tnow = ticks(), nnow = now_ns();
  const double ns_per_tick =
      tnow > tsc0_ && nnow > ns0_ ? double(nnow - ns0_) / double(tnow - tsc0_) : 1.0;
  std::ostringstream os;
  os << header << " — last " << std::min<uint64_t>(next, ring_.size()) << " operations:\n";
  uint64_t first = next > ring_.size() ? next - ring_.size() : 0;
  for (uint64_t id = first; id < next; ++id) {
    const Entry& e = ring_[id & mask_];
    auto state = State(e.state.load(std::memory_order_acquire) & 3);
    uint64_t t0 = e.t_start.load(std::memory_order_relaxed);
    uint64_t t1 = e.t_end.load(std::memory_order_relaxed);
    double run_us = t0 ? double((state == State::kRunning ? tnow : t1) - t0) * ns_per_tick / 1e3 : 0.0;
    int32_t root = e.root.load(std::memory_order_relaxed);
    const auto op = CollOp(e.op.load(std::memory_order_relaxed));
    const bool p2p = op == CollOp::kSend || op == CollOp::kRecv;  // root holds the tag
    const algo::Algorithm* a = e.algo.load(std::memory_order_relaxed);
    const char* algo = a ? a->name.c_str() : "";
    char line[320];
    std::snprintf(line, sizeof line,
                  "  seq %-6llu %-14s %-5s count %-10llu %-4s %s %-6s %-8s %10.1f us%s\n",
                  (unsigned long long)e.seq.load(std::memory_order_relaxed),
                  p2p ? "send/recv" : coll_op_name(op),
                  dtype_name(DType(e.dtype.load(std::memory_order_relaxed))),
                  (unsigned long long)e.count.load(std::memory_order_relaxed),
                  reduce_op_name(ReduceOp(e.rop.load(std::memory_order_relaxed))),
                  root < 0 ? "" : ((p2p ? "tag " : "root ") + std::to_string(root)).c_str(), algo,
                  states[int(state)], run_us, state == State::kRunning ? "  <- in progress" : "");
    os << line;
  }
  return os.str();
}

}  // namespace braid::comm
