// The memory probe behind `this-machine`'s simulated copies
// (braid/plan_probe.h): braid's shared-memory wire between two ranks with
// their buffers in the last-level cache and far beyond it.
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "braid/env.h"
#include "braid/error.h"
#include "braid/plan_probe.h"
#include "braid/reduce.h"
#include "braid/tuning.h"
#include "plan/probe/tuning_json.h"

namespace braid::plan {
namespace {

constexpr size_t kCachedBytes = size_t(1) << 20;
constexpr size_t kBeyondBytes = size_t(64) << 20;

// "32768K", "2M", "1024" -> bytes; 0 for anything else.
double cache_size(const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || !(v > 0)) return 0;
  switch (*end) {
    case 'K': return v * 1024;
    case 'M': return v * 1024 * 1024;
    case 'G': return v * 1024 * 1024 * 1024;
    default: return v;
  }
}

}  // namespace

double last_level_cache_bytes() {
  double best = 0;
  for (int i = 0; i < 8; ++i) {
    std::ifstream in("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/size");
    std::string text;
    if (in >> text) best = std::max(best, cache_size(text));
  }
  return best;
}

MemorySample probe_memory(bool leader, const std::function<void(const void*, size_t)>& send,
                          const std::function<void(void*, size_t)>& recv) {
  const auto mem = comm::probe_buffer(kBeyondBytes);
  uint8_t* const buf = mem.get();
  std::fill(buf, buf + kBeyondBytes, uint8_t(1));  // mapped before any timing
  auto round_trip = [&](size_t bytes, int iters) {
    return comm::round_trip_s(leader, send, recv, buf, bytes, iters);
  };
  auto best_of = [&](int trials, size_t bytes, int iters) {
    double t = 1e30;
    for (int i = 0; i < trials; ++i) t = std::min(t, round_trip(bytes, iters));
    return t;
  };
  // The leader's reduction, in place on two 4 MiB halves, as the
  // algorithms fold a received block into their accumulator: in the
  // last-level cache, past the core's own. In the buffer's first 8 MiB,
  // which the round trips also use.
  const size_t n = (4 << 20) / sizeof(float);
  float* const a = reinterpret_cast<float*>(buf);
  double t_red = 1e30;
  auto reduce_burst = [&] {
    if (!leader) return;
    std::fill(a, a + 2 * n, 1.0f);
    for (int i = 0; i < 8; ++i) {
      const double t0 = wall_s();
      reduce2(a, a, a + n, n, DType::kF32, ReduceOp::kSum);
      t_red = std::min(t_red, wall_s() - t0);
    }
  };
  // Each figure is the best of its trials, and the trials of each are
  // spread over three rounds of the probe: this machine's rates move
  // from one moment to the next (the reduction jumps between about 48
  // and 62 GB/s, one core alone; a probe that took each figure in one
  // stretch read one way 17.7 GB/s cached where others read 21-22.7).
  const CoreShare core_share;
  double t_cached = 1e30, t_beyond = 1e30;
  for (int round = 0; round < 3; ++round) {
    round_trip(kCachedBytes, 5);  // warm-up: the rings and the cache
    t_cached = std::min(t_cached, best_of(5, kCachedBytes, 20));
    reduce_burst();
    round_trip(kBeyondBytes, 1);  // warm-up: the pages, and the cache flushed
    t_beyond = std::min(t_beyond, best_of(2, kBeyondBytes, 1));
  }
  // The smaller of the two ranks' shares of a core meanwhile.
  double share = core_share.get();
  if (!leader) {
    send(&share, sizeof share);
    return MemorySample{};
  }
  double theirs = 0;
  recv(&theirs, sizeof theirs);
  MemorySample s;
  s.core_share = std::min(share, theirs);
  s.cached_gbps = double(kCachedBytes) / t_cached / 1e9;
  s.beyond_gbps = double(kBeyondBytes) / t_beyond / 1e9;
  s.beyond_ws_bytes = 2.0 * double(kBeyondBytes);
  s.reduce_gbps = double(n * sizeof(float)) / std::max(t_red, 1e-9) / 1e9;
  s.llc_bytes = last_level_cache_bytes();
  return s;
}

std::string merge_memory_probe(const std::string& text, const MemorySample& s) {
  nlohmann::json j = tuning_json(text);
  if (!(s.cached_gbps > 0 && s.beyond_gbps > 0 && s.beyond_ws_bytes > 0 && s.reduce_gbps > 0 &&
        s.llc_bytes > 0)) {  // e.g. no cache size in sysfs: nothing the simulator could use
    j.erase("shm_memory");
    return j.dump(2) + "\n";
  }
  j["shm_memory"] = {{"cached_gbps", s.cached_gbps},
                     {"beyond_gbps", s.beyond_gbps},
                     {"beyond_ws_bytes", s.beyond_ws_bytes},
                     {"reduce_gbps", s.reduce_gbps},
                     {"llc_bytes", s.llc_bytes}};
  return j.dump(2) + "\n";
}

std::optional<MemorySample> memory_probe_from(const std::string& text, const std::string& from) {
  if (text.empty()) return std::nullopt;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    if (!j.is_object() || !j.contains("shm_memory")) return std::nullopt;
    const nlohmann::json& m = j.at("shm_memory");
    auto positive = [&](const char* key) {
      const double v = m.at(key).get<double>();
      if (!(v > 0))
        throw Error(Errc::kInvalidArgument, from + ": shm_memory." + key + ": must be a number > 0");
      return v;
    };
    MemorySample s;
    s.cached_gbps = positive("cached_gbps");
    s.beyond_gbps = positive("beyond_gbps");
    s.beyond_ws_bytes = positive("beyond_ws_bytes");
    s.reduce_gbps = positive("reduce_gbps");
    s.llc_bytes = positive("llc_bytes");
    return s;
  } catch (const nlohmann::json::exception& e) {
    throw Error(Errc::kInvalidArgument, from + ": shm_memory: " + e.what());
  }
}

}  // namespace braid::plan
