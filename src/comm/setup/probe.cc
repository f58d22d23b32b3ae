#include "comm/setup/probe.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <fstream>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "braid/env.h"
#include "braid/error.h"
#include "braid/reduce.h"

namespace braid::comm {
namespace {

constexpr size_t kBigBytes = 16 << 20;
constexpr size_t kHugePage = 2 << 20;

// Minimum over `trials` of `once()`: the least disturbed run, so a probe
// taken beside other work still measures the link.
template <class F>
double min_of(int trials, F&& once) {
  double best = 1e30;
  for (int i = 0; i < trials; ++i) best = std::min(best, once());
  return best;
}

// Tuning text as a JSON object ("" or JSON that is not an object gives an
// empty one); nullopt if it does not parse.
std::optional<nlohmann::json> tuning_object(const std::string& text) {
  if (text.empty()) return nlohmann::json::object();
  try {
    nlohmann::json j = nlohmann::json::parse(text);
    return j.is_object() ? j : nlohmann::json::object();
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

}  // namespace

ProbeSample reference_probe(const std::string& kind) {
  // `braid bench -n 2 --probe [--transport tcp]` on the reference VM, the
  // machine the built-in CostParams were fitted on: the middle of many
  // runs, since a VM's speed drifts from hour to hour (which is why the
  // scaled values are clamped, and why a probe there lands near, not on,
  // the built-in values).
  if (kind == "tcp" || kind == "net") return ProbeSample{6.5e-6, 4.8, 46.0, 1};
  return ProbeSample{0.37e-6, 31.0, 46.0, 1};
}

std::unique_ptr<uint8_t, void (*)(void*)> probe_buffer(size_t bytes) {
  std::unique_ptr<uint8_t, void (*)(void*)> mem(
      static_cast<uint8_t*>(std::aligned_alloc(kHugePage, bytes)), &std::free);
  if (!mem)
    throw Error(Errc::kIo, "probe: cannot allocate " + std::to_string(bytes >> 20) + " MiB");
  ::madvise(mem.get(), bytes, MADV_HUGEPAGE);
  return mem;
}

double round_trip_s(bool leader, const std::function<void(const void*, size_t)>& send,
                    const std::function<void(void*, size_t)>& recv, void* buf, size_t bytes,
                    int iters) {
  const double t0 = now_s();
  for (int i = 0; i < iters; ++i) {
    if (leader) {
      send(buf, bytes);
      recv(buf, bytes);
    } else {
      recv(buf, bytes);
      send(buf, bytes);
    }
  }
  return (now_s() - t0) / iters / 2;
}

ProbeSample probe_link(bool leader, const std::function<void(const void*, size_t)>& send,
                       const std::function<void(void*, size_t)>& recv) {
  const auto mem = probe_buffer(kBigBytes);
  uint8_t* const buf = mem.get();
  auto round_trip = [&](size_t bytes, int iters) {
    return round_trip_s(leader, send, recv, buf, bytes, iters);
  };
  ProbeSample s;
  round_trip(8, 100);  // warm-up: both ranks running, paths set up
  const CoreShare core_share;
  {
    // Each round trip timed alone; the 20th percentile, so that a rank
    // descheduled for part of the run (a busy neighbour, a rank that
    // yields its core) does not set α: once, 3 trials of 300 round trips
    // all averaged 8.7 us where the link takes 0.37.
    std::vector<double> t(600);
    for (auto& x : t) x = round_trip(8, 1);
    std::nth_element(t.begin(), t.begin() + t.size() / 5, t.end());
    s.alpha_s = t[t.size() / 5];
  }
  round_trip(kBigBytes, 1);  // touches the buffers and the transport's rings
  const double t_big = min_of(4, [&] { return round_trip(kBigBytes, 1); });
  s.gbps = double(kBigBytes) / std::max(t_big - s.alpha_s, 1e-9) / 1e9;
  // The share of a core this rank had while the messages went back and
  // forth: about 1 when each rank has a core of its own, about ½ when it
  // shares one with a busy task. Over both phases (~15 ms), not the small
  // messages alone: those take ~0.5 ms, less than the scheduler's slice,
  // and fitted between a busy neighbour's turns (seen once in a test).
  const double share = core_share.get();
  if (leader) {
    double theirs = 0;
    recv(&theirs, sizeof theirs);
    s.core_share = std::min(share, theirs);
  } else {
    send(&share, sizeof share);
    return ProbeSample{};
  }
  // In place (a += b), as the algorithms fold a received block into their
  // accumulator, on the two halves of the message buffer: its pages are
  // already mapped (fresh ones cost more than the sums here).
  const size_t n = kBigBytes / 2 / sizeof(float);
  float* a = reinterpret_cast<float*>(buf);
  const float* b = a + n;
  std::fill(a, a + 2 * n, 1.0f);
  const double t_red = min_of(8, [&] {
    const double t0 = now_s();
    reduce2(a, a, b, n, DType::kF32, ReduceOp::kSum);
    return now_s() - t0;
  });
  s.reduce_gbps = double(kBigBytes / 2) / std::max(t_red, 1e-9) / 1e9;
  return s;
}

namespace {
// measured / reference, kept within [1/4, 4]: the formulas were fitted on
// one machine, and a probe disturbed by other work must not move the
// model further than that.
double ratio(double measured, double reference) {
  if (!(measured > 0)) return 1;
  return std::clamp(measured / reference, 0.25, 4.0);
}
}  // namespace

LinkCost calibrate_link(const std::string& kind, const ProbeSample& s) {
  const CostParams d;
  const ProbeSample ref = reference_probe(kind);
  LinkCost l = kind == "net" ? d.net : kind == "tcp" ? d.tcp : d.shm;
  l.alpha_s *= ratio(s.alpha_s, ref.alpha_s);
  l.beta_s_per_b /= ratio(s.gbps, ref.gbps);
  return l;
}

double calibrate_reduce_gbps(const std::string& kind, const ProbeSample& s) {
  const double d = 1.0 / CostParams{}.gamma_s_per_b / 1e9;
  return d * ratio(s.reduce_gbps, reference_probe(kind).reduce_gbps);
}

std::string merge_probe(const std::string& text, const std::string& kind, const ProbeSample& s,
                        const std::string& host) {
  nlohmann::json j = tuning_object(text).value_or(nlohmann::json::object());
  const LinkCost l = calibrate_link(kind, s);
  j[kind] = {{"alpha_us", l.alpha_s * 1e6}, {"gbps", 1.0 / l.beta_s_per_b / 1e9}};
  j["reduce_gbps"] = calibrate_reduce_gbps(kind, s);
  // What the probe measured, per kind; a "probed" that is not an object
  // (a hand-edited file) is replaced, as the calibration above is.
  if (!j["probed"].is_object()) j["probed"] = nlohmann::json::object();
  j["probed"][kind] = {{"alpha_us", s.alpha_s * 1e6},
                       {"gbps", s.gbps},
                       {"reduce_gbps", s.reduce_gbps},
                       {"core_share", s.core_share},
                       {"host", host}};
  return j.dump(2) + "\n";
}

void write_tuning(const std::string& path, const std::string& text) {
  const std::filesystem::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  // A name of this process's own, so that two jobs probing at once do not
  // write into each other's temporary file; the rename is atomic.
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp);
    out << text;
    if (!out) throw Error(Errc::kIo, "cannot write tuning file " + tmp);
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    throw Error(Errc::kIo, "cannot rename tuning file to " + path);
  }
}

bool may_probe() {
  return !env_str("BRAID_TUNING") && env_str("BRAID_PROBE").value_or("1") != "0";
}

std::vector<ProbeLink> probe_plan(const std::string& text,
                                  const std::vector<ProbeLink>& peer_of_kind, int size,
                                  int max_local, int cores) {
  if (!may_probe()) return {};
  if (size < 2 || max_local > cores) return {};
  const auto j = tuning_object(text);
  if (!j) return {};  // the parser has already rejected it
  std::vector<ProbeLink> plan;
  for (const auto& l : peer_of_kind)
    if (l.peer > 0 && !j->contains(l.kind)) plan.push_back(l);
  return plan;
}

std::string format_plan(const std::vector<ProbeLink>& plan) {
  std::string s;
  for (const auto& l : plan) s += (s.empty() ? "" : ",") + l.kind + ":" + std::to_string(l.peer);
  return s;
}

std::vector<ProbeLink> parse_plan(const std::string& s) {
  std::vector<ProbeLink> plan;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const auto colon = item.find(':');
    if (colon == std::string::npos) continue;
    // The text comes through the store: a bad one is an Error, not a
    // std::stoi exception that nothing catches.
    const char* num = item.data() + colon + 1;
    const char* end = item.data() + item.size();
    int peer = -1;
    const auto [stop, ec] = std::from_chars(num, end, peer);
    if (ec != std::errc() || stop != end || num == end || peer < 0)
      throw Error(Errc::kProtocol, "probe plan '" + s.substr(0, 200) + "': '" + item.substr(0, 64) +
                                       "' does not name a rank");
    plan.push_back({item.substr(0, colon), peer});
  }
  return plan;
}

}  // namespace braid::comm
