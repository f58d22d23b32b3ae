#include "comm/algo/select.h"

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
#include "comm/setup/probe.h"

namespace braid::comm {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr size_t kChunk = 256 * 1024;  // chain's pipelining chunk, as its model assumes it
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

}  // namespace

CollOp parse_coll_op(const std::string& name) {
  for (const algo::Collective& c : algo::collectives())
    if (name == c.name) return c.op;
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
    p.net = p.tcp;
    link("net", p.net);
    if (j.contains("reduce_gbps")) p.gamma_s_per_b = 1.0 / (j["reduce_gbps"].get<double>() * 1e9);
  } catch (const nlohmann::json::exception& e) {
    throw Error(Errc::kInvalidArgument, "BRAID_TUNING " + from + ": " + e.what());
  }
  return p;
}

Selector::Selector(int size, bool any_tcp, CostParams p, int hosts, int max_local, bool all_shm,
                   int cores, int nics)
    : n_(size), link_(any_tcp ? p.tcp : p.shm), shm_(p.shm), gamma_(p.gamma_s_per_b),
      hosts_(hosts), max_local_(max_local), nics_(std::max(nics, 1)), all_shm_(all_shm && !any_tcp && size > 1),
      fit_shm_(all_shm && !any_tcp), cores_(std::max(cores, 1)),
      deterministic_(env_flag("BRAID_DETERMINISTIC")) {
  // More ranks than cores on a host: a message usually finds its receiver
  // asleep, so each step of a schedule costs a wake-up, not α.
  if (oversubscribed()) {
    link_.alpha_s = std::max(link_.alpha_s, kWakeAlpha);
    shm_.alpha_s = std::max(shm_.alpha_s, kWakeAlpha);
  }
  // Across such hosts, an algorithm's steps inside a host run one copy at
  // a time: the host's ranks take turns on its cores. The shared-memory β
  // is fitted on one host's all_reduce, two ranks on two cores copying at
  // once through the memory bus; one copy alone moves as the probe's
  // reference sample does, 31 GB/s where the fit has 9 (probe.cc), so
  // those steps are priced at that rate. At 2 hosts x 2 ranks on one core
  // each, hier's tree and chain inside a host took about 240 µs at 1 MiB
  // where the fitted β priced them at 500 (docs/PERFORMANCE.md §8), and
  // the selector passed hier over.
  if (oversubscribed() && hosts_ > 1)
    shm_.beta_s_per_b /= reference_probe("shm").gbps * 1e9 * CostParams{}.shm.beta_s_per_b;
}

void Selector::set_override(const std::string& collective, const std::string& algo) {
  CollOp op = parse_coll_op(collective);
  if (algo == "auto" || algo.empty()) {
    overrides_.erase(op);
    return;
  }
  const algo::Algorithm* a = algo::find(op, algo);
  if (a == nullptr)
    throw Error(Errc::kInvalidArgument, "unknown algorithm '" + algo + "' for " + collective +
                                            " (choose from: " + algo::names(op) + ", auto)");
  overrides_[op] = a;
  const bool reduction =
      op == CollOp::kAllReduce || op == CollOp::kReduceScatter || op == CollOp::kReduce;
  const algo::AlgoId id = a->id;
  if (reduction && deterministic_ && id != algo::AlgoId::kDirect && id != algo::AlgoId::kOneshot) {
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
    try {
      set_override(item.substr(0, colon), item.substr(colon + 1));
    } catch (const Error& e) {
      throw Error(e.code(), std::string("BRAID_ALGO: ") + e.what());
    }
  }
}

const char* Selector::why_not(const algo::Algorithm& a, bool shared_span) const {
  return a.why_not(algo::Fit{n_, hosts_, fit_shm_, shared_span});
}

algo::CostInputs Selector::inputs(size_t bytes) const {
  algo::CostInputs m;
  m.n = n_;
  m.N = double(bytes);
  m.a = link_.alpha_s;
  m.b = link_.beta_s_per_b;
  // γ is probed on buffers far larger than the caches; a reduction whose
  // operands fit in cache runs several times faster.
  m.g = bytes <= kCacheBytes ? gamma_ / kCacheSpeedup : gamma_;
  // With more ranks than cores the ranks take turns on the cores, so a
  // schedule lasts at least its total work (every message's hand-off and
  // bytes, summed over the ranks) shared among the cores, however short its
  // critical path (CostInputs::shared). A hand-off costs core time at both
  // ends (the waker's system call, the sleeper's switch back in): the work
  // counts 2α per message where the path counts one. Chunked chains and
  // rings send n − 1 messages per chunk where a tree sends n − 1 in all, so
  // from 4 ranks on 2 cores trees win broadcast and reduce at every size.
  // Measured (bench/select_regret.py, 3-8 ranks on 2 cores, 256 KiB-16 MiB,
  // geometric means of four sweeps): the plain model's chain broadcast and
  // ring reduce took up to 1.43× the best algorithm's time (broadcast 4 MiB
  // at 4 ranks; reduce 1 MiB at 8: 1.33×), 1.055× on average; this one
  // 1.023× on average, worst 1.32× (reduce 1 MiB at 3 ranks, picked the same
  // before). Not applied to all_reduce, whose oversubscribed terms are fitted.
  m.aw = 2 * m.a;
  m.as = shm_.alpha_s;
  m.bs = shm_.beta_s_per_b;
  while (m.p * 2 <= n_) m.p *= 2;
  m.folded = m.p != n_;
  m.chunk = double(kChunk);
  m.ring_chunk = double(ring_chunk_);
  m.chunks = std::max(1.0, std::ceil(m.N / m.n / m.ring_chunk));
  m.hosts = hosts_;
  m.max_local = max_local_;
  m.nics = nics_;
  m.cores = cores_;
  m.all_shm = all_shm_;
  m.oversubscribed = oversubscribed();
  return m;
}

double Selector::predict(const algo::Algorithm& a, size_t bytes) const {
  if (why_not(a) != nullptr) return kInf;
  if (n_ == 1) return 0;
  return a.cost(inputs(bytes));
}

double Selector::predict(CollOp op, const std::string& algo, size_t bytes) const {
  const algo::Algorithm* a = algo::find(op, algo);
  return a ? predict(*a, bytes) : kInf;
}

// The algorithms that fold every element in rank order with one
// reduce_many: direct, and for all_reduce also oneshot. Their results are
// bitwise identical to each other whatever the size.
const algo::Algorithm& Selector::rank_order(CollOp op, size_t bytes) const {
  using algo::AlgoId;
  const algo::Algorithm& direct = algo::get(op, AlgoId::kDirect);
  if (op != CollOp::kAllReduce) return direct;
  auto it = overrides_.find(op);
  if (it != overrides_.end() &&
      (it->second->id == AlgoId::kDirect || it->second->id == AlgoId::kOneshot))
    return *it->second;
  const algo::Algorithm& oneshot = algo::get(op, AlgoId::kOneshot);
  return predict(oneshot, bytes) < predict(direct, bytes) ? oneshot : direct;
}

const algo::Algorithm& Selector::select(CollOp op, size_t bytes, DType t, bool shared_span) const {
  auto forced = overrides_.find(op);
  if (shared_span && forced == overrides_.end())
    for (const algo::Algorithm* a : algo::algorithms(op))
      if (a->id == algo::AlgoId::kShared) return *a;
  const bool reduction =
      op == CollOp::kAllReduce || op == CollOp::kReduceScatter || op == CollOp::kReduce;
  // Deterministic mode wins over any other override: only rank-order
  // folding is bitwise identical across algorithms and sizes.
  if (reduction && deterministic_) return rank_order(op, bytes);
  if (forced != overrides_.end()) {
    const algo::Algorithm& a = *forced->second;
    if (const char* why = why_not(a, shared_span))
      throw Error(Errc::kInvalidArgument, std::string(coll_op_name(op)) + " algorithm '" +
                                              a.name + "' (forced by BRAID_ALGO or "
                                              "set_algorithm) cannot run here: it " + why);
    return a;
  }
  // Rank-order folding is also the only way f16/bf16 sums of more than two
  // ranks accumulate in f32 end to end.
  if (reduction && (t == DType::kF16 || t == DType::kBF16) && n_ > 2) return rank_order(op, bytes);
  const auto& algos = algo::algorithms(op);
  if (algos.empty())
    throw Error(Errc::kInternal, std::string("no algorithm for ") + coll_op_name(op));
  const algo::Algorithm* best = nullptr;
  double best_t = kInf;
  for (const algo::Algorithm* a : algos) {
    if (why_not(*a, shared_span) != nullptr) continue;
    double c = predict(*a, bytes);
    if (best == nullptr || c < best_t) {
      best_t = c;
      best = a;
    }
  }
  if (best == nullptr)
    throw Error(Errc::kInternal, std::string("no algorithm of ") + coll_op_name(op) + " applies");
  return *best;
}

}  // namespace braid::comm

namespace braid::comm {

double predict_one_host(const CostParams& p, const std::string& collective,
                        const std::string& algo, size_t bytes, int ranks, int cores) {
  const Selector model(ranks, false, p, 1, ranks, true, cores);
  return model.predict(parse_coll_op(collective), algo, bytes);
}

namespace {

// The selector of a communicator shaped like `g`, as price_collective and
// price_algorithm build it.
Selector group_selector(const GroupLinks& g) {
  if (g.ranks < 1 || g.hosts < 1 || g.max_local < 1)
    throw Error(Errc::kInvalidArgument, "price_collective: a group needs ranks, hosts and max_local >= 1");
  CostParams p;
  p.shm = g.inner;
  p.tcp = p.net = g.outer;
  p.gamma_s_per_b = g.gamma_s_per_b;
  const bool spans = g.hosts > 1;
  Selector s(g.ranks, spans, p, g.hosts, g.max_local, g.inner_is_shm && !spans, g.cores, g.nics);
  s.set_chunk_bytes(g.chunk_bytes);
  return s;
}

}  // namespace

CollectivePrice price_collective(const std::string& collective, size_t bytes, const GroupLinks& g) {
  const Selector model = group_selector(g);
  // Point-to-point has a registry entry but is not a collective BRAID_ALGO names.
  const CollOp op = collective == "send" ? CollOp::kSend : parse_coll_op(collective);
  const algo::Algorithm& a = model.select(op, bytes, DType::kF32);
  return {a.name, model.predict(a, bytes)};
}

double price_algorithm(const std::string& collective, const std::string& algo, size_t bytes,
                       const GroupLinks& g) {
  const Selector model = group_selector(g);
  const CollOp op = parse_coll_op(collective);
  const algo::Algorithm* a = algo::find(op, algo);
  if (a == nullptr)
    throw Error(Errc::kInvalidArgument, "unknown algorithm '" + algo + "' for " + collective +
                                            " (choose from: " + algo::names(op) + ")");
  return model.predict(*a, bytes);
}

}  // namespace braid::comm
