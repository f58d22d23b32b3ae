#include "comm/select.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <mutex>
#include <set>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "braid/env.h"
#include "braid/error.h"
#include "braid/log.h"
#include "comm/algo/host_ring.h"

namespace braid::comm {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr size_t kChunk = 256 * 1024;  // pipelining chunk assumed by the model
// Measured on this project's 2-core VM (2026-11-22, braid bench --algo):
// - a sleeping receiver costs ~12 µs per schedule step when ranks outnumber
//   cores (4 ranks, 1 KiB: rd 24 µs for 2 steps, hd 50 µs for 4, ring 75 µs
//   for 6);
// - all_reduce of 4 KiB–256 KiB between 2 ranks reduces at ~80–100 GB/s (the
//   rd/ring gaps: rd 1.67 vs ring 2.71 µs at 4 KiB, 7.37 vs 6.70 at 64 KiB,
//   26.8 vs 19.4 at 256 KiB), ~8× the 16 MiB figure the probe reports.
constexpr double kWakeAlpha = 12e-6;
constexpr size_t kCacheBytes = 256 * 1024;
constexpr double kCacheSpeedup = 8;

double log2c(int n) { return std::ceil(std::log2(double(std::max(n, 1)))); }

}  // namespace

CollOp parse_coll_op(const std::string& name) {
  static const std::pair<const char*, CollOp> names[] = {
      {"broadcast", CollOp::kBroadcast},     {"reduce", CollOp::kReduce},
      {"all_reduce", CollOp::kAllReduce},    {"all_gather", CollOp::kAllGather},
      {"reduce_scatter", CollOp::kReduceScatter}, {"gather", CollOp::kGather},
      {"scatter", CollOp::kScatter},         {"all_to_all", CollOp::kAllToAll},
      {"all_to_all_v", CollOp::kAllToAllV},  {"barrier", CollOp::kBarrier},
  };
  for (auto& [n, op] : names)
    if (name == n) return op;
  throw Error(Errc::kInvalidArgument, "unknown collective '" + name + "'");
}

std::string default_tuning_path() {
  if (auto v = env_str("BRAID_TUNING")) return *v;
  if (auto x = env_str("XDG_CACHE_HOME")) return *x + "/braid/tuning.json";
  if (auto h = env_str("HOME")) return *h + "/.cache/braid/tuning.json";
  return "";
}

std::string read_tuning_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) return "";
  std::ostringstream text;
  text << f.rdbuf();
  return text.str();
}

std::string read_tuning() {
  const std::string path = default_tuning_path();
  if (path.empty()) return "";
  if (env_str("BRAID_TUNING") && !std::ifstream(path))
    throw Error(Errc::kInvalidArgument, "BRAID_TUNING: cannot open " + path);
  return read_tuning_file(path);  // "" with no cached probe yet: the built-in values
}

CostParams parse_cost_params(const std::string& text, const std::string& from) {
  CostParams p;
  if (text.empty()) return p;
  try {
    nlohmann::json j = nlohmann::json::parse(text);
    auto link = [&](const char* key, LinkCost& l) {
      if (!j.contains(key)) return;
      auto& o = j[key];
      if (o.contains("alpha_us")) l.alpha_s = o["alpha_us"].get<double>() * 1e-6;
      if (o.contains("gbps")) l.beta_s_per_b = 1.0 / (o["gbps"].get<double>() * 1e9);
    };
    link("shm", p.shm);
    link("tcp", p.tcp);
    if (j.contains("reduce_gbps")) p.gamma_s_per_b = 1.0 / (j["reduce_gbps"].get<double>() * 1e9);
  } catch (const nlohmann::json::exception& e) {
    throw Error(Errc::kInvalidArgument, "BRAID_TUNING " + from + ": " + e.what());
  }
  return p;
}

Selector::Selector(int size, bool any_tcp, CostParams p, int hosts, int max_local, bool all_shm,
                   int cores)
    : n_(size), link_(any_tcp ? p.tcp : p.shm), shm_(p.shm), gamma_(p.gamma_s_per_b),
      hosts_(hosts), max_local_(max_local), all_shm_(all_shm && !any_tcp && size > 1),
      cores_(std::max(cores, 1)),
      deterministic_(env_flag("BRAID_DETERMINISTIC")) {
  // More ranks than cores on a host: a message usually finds its receiver
  // asleep, so each step of a schedule costs a wake-up, not α.
  if (oversubscribed()) {
    link_.alpha_s = std::max(link_.alpha_s, kWakeAlpha);
    shm_.alpha_s = std::max(shm_.alpha_s, kWakeAlpha);
  }
}

const std::vector<std::string>& Selector::algorithms_for(CollOp op) {
  static const std::vector<std::string> all_reduce = {"ring", "hd",    "rd",     "direct",
                                                      "hier", "chain", "oneshot"};
  static const std::vector<std::string> broadcast = {"tree", "chain"};
  static const std::vector<std::string> reduce = {"tree", "ring", "direct"};
  static const std::vector<std::string> gathers = {"ring", "direct"};
  static const std::vector<std::string> direct = {"direct"};
  static const std::vector<std::string> barrier = {"dissemination"};
  switch (op) {
    case CollOp::kAllReduce: return all_reduce;
    case CollOp::kBroadcast: return broadcast;
    case CollOp::kReduce: return reduce;
    case CollOp::kAllGather: case CollOp::kReduceScatter: return gathers;
    case CollOp::kBarrier: return barrier;
    default: return direct;
  }
}

void Selector::set_override(const std::string& collective, const std::string& algo) {
  CollOp op = parse_coll_op(collective);
  if (algo == "auto" || algo.empty()) {
    overrides_.erase(op);
    return;
  }
  auto algos = algorithms_for(op);
  if (std::find(algos.begin(), algos.end(), algo) == algos.end()) {
    std::string list;
    for (auto& a : algos) list += (list.empty() ? "" : ", ") + a;
    throw Error(Errc::kInvalidArgument, "unknown algorithm '" + algo + "' for " + collective +
                                            " (choose from: " + list + ", auto)");
  }
  overrides_[op] = algo;
  const bool reduction =
      op == CollOp::kAllReduce || op == CollOp::kReduceScatter || op == CollOp::kReduce;
  if (reduction && deterministic_ && algo != "direct" && algo != "oneshot") {
    // Once per collective and process: every split and rank would repeat it.
    static std::mutex mu;
    static std::set<CollOp> warned;
    std::lock_guard<std::mutex> l(mu);
    if (warned.insert(op).second)
      BRAID_LOG(kWarn, "BRAID_DETERMINISTIC=1: " << collective << " algorithm '" << algo
                           << "' is not used; reductions fold in rank order (direct"
                           << (op == CollOp::kAllReduce ? " or oneshot" : "") << ")");
  }
}

void Selector::load_env_overrides() {
  auto v = env_str("BRAID_ALGO");
  if (!v) return;
  std::stringstream ss(*v);
  std::string item;
  while (std::getline(ss, item, ',')) {
    auto colon = item.find(':');
    if (colon == std::string::npos)
      throw Error(Errc::kInvalidArgument,
                  "BRAID_ALGO: expected collective:algorithm, got '" + item + "'");
    set_override(item.substr(0, colon), item.substr(colon + 1));
  }
}

double Selector::predict(CollOp op, const std::string& algo, size_t bytes) const {
  const double n = n_, N = double(bytes), a = link_.alpha_s, b = link_.beta_s_per_b;
  // γ is probed on buffers far larger than the caches; a reduction whose
  // operands fit in cache runs several times faster.
  const double g = bytes <= kCacheBytes ? gamma_ / kCacheSpeedup : gamma_;
  if (n_ == 1) return 0;
  int p = 1;
  while (p * 2 <= n_) p *= 2;
  const bool folded = p != n_;
  const double chunks = std::max(1.0, std::ceil(N / n / double(kChunk)));
  // With more ranks than cores the ranks take turns on the cores, so a
  // schedule lasts at least its total work (every message's hand-off and
  // bytes, summed over the ranks) shared among the cores, however short its
  // critical path. A hand-off costs core time at both ends (the waker's
  // system call, the sleeper's switch back in): the work counts 2α per
  // message where the path counts one. Chunked chains and rings send n − 1
  // messages per chunk where a tree sends n − 1 in all, so from 4 ranks on 2
  // cores trees win broadcast and reduce at every size. Measured
  // (bench/select_regret.py, 3-8 ranks on 2 cores, 256 KiB-16 MiB, geometric
  // means of four sweeps): the plain model's chain broadcast and ring reduce
  // took up to 1.43× the best algorithm's time (broadcast 4 MiB at 4 ranks;
  // reduce 1 MiB at 8: 1.33×), 1.055× on average; this one 1.023× on
  // average, worst 1.32× (reduce 1 MiB at 3 ranks, picked the same before).
  // Not applied to all_reduce, whose oversubscribed terms are fitted.
  auto shared = [&](double path, double work) {
    return oversubscribed() ? std::max(path, work / cores_) : path;
  };
  const double aw = 2 * a;
  switch (op) {
    case CollOp::kAllReduce:
      if (algo == "ring")
        return (2 * (n - 1) + chunks - 1) * a + 2 * (n - 1) / n * N * b + (n - 1) / n * N * g;
      // hd and rd work in place in recv: an out-of-place call first copies
      // the input (priced like a reduction pass, γ per byte).
      if (algo == "hd")
        return 2 * std::log2(p) * a + 2 * (p - 1.0) / p * N * b + (p - 1.0) / p * N * g +
               N * g + (folded ? 2 * (a + N * b) + N * g : 0);
      if (algo == "rd")
        return std::log2(p) * (a + N * b + 2 * N * g) + N * g +
               (folded ? 2 * (a + N * b) + N * g : 0);
      if (algo == "direct")
        return 2 * (n - 1) * a + 2 * (n - 1) / n * N * b + (n - 1) / n * N * g * 1.2;
      if (algo == "oneshot") {
        // One step, n−1 messages out and in at once; every byte crosses
        // (n−1) times and is folded once per peer. At 2 ranks it is rd's
        // single exchange plus a staging copy, so rd keeps that case.
        // Measured on 2 cores (braid bench, 2026-11-23): the n−1 concurrent
        // messages cost about a quarter step each beyond the first, and the
        // byte term needs 3× its naive (b + g) to put the crossover with rd
        // where it was measured: ~3 KiB at 8 ranks, 4–8 KiB at 4–5, ~48 KiB
        // at 3 (oversubscribed; below it oneshot took 0.55–0.85× rd's time).
        // Only over shared memory, where small sends land in the peers' fast
        // boxes without waking them: over TCP every message is a wake-up,
        // and 8 oversubscribed ranks took 2.7–3.4 ms against rd's 0.8–1.1.
        if (n_ == 2 || !all_shm_) return kInf;
        return a * (1 + (n - 2) / 4) + 3 * (n - 1) * N * (b + g);
      }
      if (algo == "chain") {
        // Pipeline fill: n−1 adds of the first chunk before rank n−1's, but
        // when ranks outnumber cores the cores work on other ranks' chunks
        // meanwhile. Measured (4 ranks on 2 cores, 1 MiB): chain 307 µs,
        // ring 637 µs; 2 ranks, 1–4 MiB: ring 1.2–1.4× faster.
        // Its n + 1 hand-offs cost n + 1 wake-ups, except that ranks
        // outnumbering cores wait by yielding, and half the hand-offs then
        // find their rank already running: measured after that change (8
        // ranks on 2 cores: 98 µs at 4 KiB, 133 at 64 KiB, where rd took
        // 100 and 188; 4 ranks: 25–52 µs at 4–64 KiB), n/2 + 1 fits.
        if (!all_shm_) return kInf;
        const double fill =
            oversubscribed() ? 0 : (n - 1) * std::min(N, double(algo::kChainSlotBytes)) * (b + g);
        const double steps = oversubscribed() ? n / 2 + 1 : n + 1;
        return steps * a + N * (b + g) + fill;
      }
      if (algo == "hier") {
        if (hosts_ < 2) return kInf;
        const double H = hosts_, L = max_local_;
        const double as = shm_.alpha_s, bs = shm_.beta_s_per_b;
        double intra = log2c(max_local_) * (as + N * bs + N * g) + (L - 1 + chunks) * as + N * bs;
        double inter = 2 * (H - 1) * a + 2 * (H - 1) / H * N * b + (H - 1) / H * N * g;
        return intra + inter;
      }
      break;
    case CollOp::kBroadcast:
      if (algo == "tree") return shared(log2c(n_) * (a + N * b), (n - 1) * (aw + N * b));
      if (algo == "chain") {
        double C = std::max(1.0, std::ceil(N / double(kChunk)));
        return shared((n - 2 + C) * (a + N / C * b), (n - 1) * (C * aw + N * b));
      }
      break;
    case CollOp::kReduce:
      if (algo == "tree")
        return shared(log2c(n_) * (a + N * b + N * g), (n - 1) * (aw + N * (b + g)));
      if (algo == "ring")
        // Reduce-scatter (n ranks, n − 1 steps of `chunks` messages), then
        // n − 1 segments to the root.
        return shared((2 * (n - 1) + chunks - 1) * a + (n - 1) / n * N * (2 * b + g),
                      n * (n - 1) * chunks * aw + (n - 1) * N * (b + g) +
                          (n - 1) * (aw + N / n * b));
      if (algo == "direct") return (n - 1) * (a + N * b) + (n - 1) * N * g;
      break;
    case CollOp::kAllGather:
      if (algo == "ring") return (n - 1 + chunks - 1) * a + (n - 1) / n * N * b;
      if (algo == "direct") return (n - 1) * a * 0.5 + (n - 1) / n * N * b * 1.3;
      break;
    case CollOp::kReduceScatter:
      if (algo == "ring") return (n - 1 + chunks - 1) * a + (n - 1) / n * N * (b + g);
      if (algo == "direct") return (n - 1) * a * 0.5 + (n - 1) / n * N * (b * 1.3 + g);
      break;
    default:
      if (algo == "direct" || algo == "dissemination") return (n - 1) * a + N * b;
  }
  return kInf;
}

// The algorithms that fold every element in rank order with one
// reduce_many: direct, and for all_reduce also oneshot. Their results are
// bitwise identical to each other whatever the size.
const std::string& Selector::rank_order(CollOp op, size_t bytes) const {
  static const std::string kDirect = "direct", kOneshot = "oneshot";
  if (op != CollOp::kAllReduce) return kDirect;
  auto it = overrides_.find(op);
  if (it != overrides_.end() && (it->second == kDirect || it->second == kOneshot)) return it->second;
  return predict(op, kOneshot, bytes) < predict(op, kDirect, bytes) ? kOneshot : kDirect;
}

const std::string& Selector::choose(CollOp op, size_t bytes, DType t) const {
  const bool reduction =
      op == CollOp::kAllReduce || op == CollOp::kReduceScatter || op == CollOp::kReduce;
  // Deterministic mode wins over any other override: only rank-order
  // folding is bitwise identical across algorithms and sizes.
  if (reduction && deterministic_) return rank_order(op, bytes);
  if (!overrides_.empty()) {
    auto it = overrides_.find(op);
    if (it != overrides_.end()) return it->second;
  }
  // Rank-order folding is also the only way f16/bf16 sums of more than two
  // ranks accumulate in f32 end to end.
  if (reduction && (t == DType::kF16 || t == DType::kBF16) && n_ > 2) return rank_order(op, bytes);
  const auto& algos = algorithms_for(op);
  size_t best = 0;
  double best_t = kInf;
  for (size_t i = 0; i < algos.size(); ++i) {
    double c = predict(op, algos[i], bytes);
    if (c < best_t) {
      best_t = c;
      best = i;
    }
  }
  return algos[best];
}

}  // namespace braid::comm
