// A shard's full state for a server joining its chain
// (replication/chain_join.h): the shard checkpoint (shard_checkpoint.cc) plus what a checkpoint leaves out
// because a resumed job recomputes it, but a chain member joining a live
// job must hold exactly as the others do:
//   meta "live/clocks", "live/contributed", "live/finished", "live/last_write"
//        (per worker, space-separated), "live/counters" (write-side
//        counters: pushes accepted / late / dropped / folded, duplicates),
//        "live/reports" (round:workers:bits of the three sums as u64 each),
//        "live/rounds" (the buffered round numbers) and per round R
//        "live/round/R/clocked" (a 0/1 per worker) and "live/round/R/folded"
//        (how many folded contributions);
//   per contribution C (round R, worker W: "live/round/R/w/W"; folded i:
//        "live/round/R/f/i"): meta "C/dense" and "C/sparse" list
//        "key:elements" entries, tensors "C/dense/<key>" [elements] and
//        "C/sparse/<key>/rows" [rows, 2] (i32 halves, as the checkpoint's rows)
//        and "C/sparse/<key>/g" [elements]; empty tensors are left out.
// The file is written and read with braid's checkpoint format (CRC-guarded).
#include <bit>
#include <cstring>
#include <sstream>

#include "braid/checkpoint.h"
#include "ps/checkpoint/saved_reader.h"
#include "ps/checkpoint/shard_checkpoint.h"

namespace braid::ps {

namespace {

template <typename T>
std::string join(const std::vector<T>& v) {
  std::string s;
  for (const auto& x : v) s += std::to_string(int64_t(x)) + " ";
  return s;
}

// A state transfer's reader: saved_reader.h, plus the live state's lists.
struct LiveReader : SavedReader {
  LiveReader(const Checkpoint& ck, const std::string& path)
      : SavedReader{ck, path, "state transfer"} {}

  // Whitespace-separated integers; `n` >= 0 demands exactly n of them.
  std::vector<int64_t> numbers(const std::string& k, int64_t n = -1) const {
    std::istringstream in(meta(k));
    std::vector<int64_t> v;
    int64_t x = 0;
    while (in >> x) v.push_back(x);
    if (!in.eof() || (n >= 0 && int64_t(v.size()) != n))
      corrupt("meta '" + k + "' is not " + (n >= 0 ? std::to_string(n) + " " : "") + "numbers");
    return v;
  }
  // "a:b a:b ..." pairs.
  std::vector<std::pair<int64_t, int64_t>> pairs(const std::string& k) const {
    std::istringstream in(meta(k));
    std::vector<std::pair<int64_t, int64_t>> v;
    int64_t a = 0, b = 0;
    char colon = 0;
    while (in >> a >> colon >> b) {
      if (colon != ':') corrupt("meta '" + k + "' is malformed");
      v.emplace_back(a, b);
    }
    if (!in.eof()) corrupt("meta '" + k + "' is malformed");
    return v;
  }
};

}  // namespace

void add_live(Checkpoint& ck, const Rounds& rounds, const Roster& roster,
              const WriteDedup& dedup, const Reports& reports) {
  const Rounds::Counters& n = rounds.counters;
  ck.meta["live/clocks"] = join(rounds.clocks());
  ck.meta["live/contributed"] = join(rounds.contributed());
  ck.meta["live/finished"] = join(roster.finished());
  ck.meta["live/last_write"] = join(dedup.last());
  ck.meta["live/counters"] = join(
      std::vector<int64_t>{n.accepted, n.late, n.dropped, n.folded, dedup.duplicates});
  std::string sums;
  for (const auto& [r, rep] : reports.all()) {
    sums += std::to_string(r);
    sums += ':';
    sums += std::to_string(rep.workers);
    for (double d : rep.sums) {
      sums += ':';
      sums += std::to_string(std::bit_cast<uint64_t>(d));
    }
    sums += ' ';
  }
  ck.meta["live/reports"] = sums;
  std::vector<int64_t> open;
  auto add_contribution = [&](const std::string& p, const Contribution& c) {
    std::string dense, sparse;
    for (const auto& [k, g] : c.dense) {
      dense += std::to_string(k) + ":" + std::to_string(g.size()) + " ";
      if (!g.empty()) ck.tensors[p + "/dense/" + std::to_string(k)] = saved_view(g.data(), {int64_t(g.size())});
    }
    for (const auto& [k, sg] : c.sparse) {
      sparse += std::to_string(k) + ":" + std::to_string(sg.rows.size()) + " ";
      const std::string q = p + "/sparse/" + std::to_string(k);
      if (sg.rows.empty()) continue;
      ck.tensors[q + "/rows"] = saved_view(sg.rows.data(), {int64_t(sg.rows.size()), 2}, DType::kI32);
      ck.tensors[q + "/g"] = saved_view(sg.g.data(), {int64_t(sg.g.size())});
    }
    ck.meta[p + "/dense"] = dense;
    ck.meta[p + "/sparse"] = sparse;
  };
  for (const auto& [r, rd] : rounds.buffered()) {
    open.push_back(r);
    const std::string p = "live/round/" + std::to_string(r);
    ck.meta[p + "/clocked"] = join(rd.clocked);
    ck.meta[p + "/folded"] = std::to_string(rd.folded.size());
    for (size_t w = 0; w < rd.by_worker.size(); ++w)
      add_contribution(p + "/w/" + std::to_string(w), rd.by_worker[w]);
    for (size_t i = 0; i < rd.folded.size(); ++i)
      add_contribution(p + "/f/" + std::to_string(i), rd.folded[i]);
  }
  ck.meta["live/rounds"] = join(open);
}

void restore_live(const Checkpoint& ck, const std::string& path, const Layout& layout,
                  int workers, Rounds& rounds, Roster& roster, WriteDedup& dedup, Reports& reports) {
  const LiveReader rd{ck, path};
  std::vector<int64_t> clocks = rd.numbers("live/clocks", workers);
  rounds.set_clocks(std::move(clocks), rd.numbers("live/contributed", workers));
  const std::vector<int64_t> fin = rd.numbers("live/finished", workers);
  std::vector<bool> finished(static_cast<size_t>(workers), false);
  for (int w = 0; w < workers; ++w) finished[size_t(w)] = fin[size_t(w)] != 0;
  roster.set_finished(std::move(finished));
  const std::vector<int64_t> lw = rd.numbers("live/last_write", workers);
  std::vector<uint64_t> last(static_cast<size_t>(workers), 0);
  for (int w = 0; w < workers; ++w) last[size_t(w)] = uint64_t(lw[size_t(w)]);
  dedup.set_last(std::move(last));
  const std::vector<int64_t> c = rd.numbers("live/counters", 5);
  rounds.counters.accepted = c[0];
  rounds.counters.late = c[1];
  rounds.counters.dropped = c[2];
  rounds.counters.folded = c[3];
  dedup.duplicates = c[4];
  std::map<int64_t, Reports::Report>& by_round = reports.all();
  by_round.clear();
  {
    std::istringstream in(rd.meta("live/reports"));
    std::string item;
    while (in >> item) {
      int64_t r = 0;
      Reports::Report rep;
      unsigned long long bits[3] = {0, 0, 0};
      if (std::sscanf(item.c_str(), "%ld:%d:%llu:%llu:%llu", &r, &rep.workers, &bits[0],
                      &bits[1], &bits[2]) != 5)
        rd.corrupt("report entry '" + item + "' is malformed");
      for (int i = 0; i < 3; ++i) rep.sums[i] = std::bit_cast<double>(uint64_t(bits[i]));
      by_round[r] = rep;
    }
  }
  auto contribution = [&](const std::string& p) {
    Contribution c;
    for (auto [k, n] : rd.pairs(p + "/dense")) {
      if (k < 0 || k >= int64_t(layout.size()) || layout.key(KeyId(k)).sparse)
        rd.corrupt(p + " names dense key " + std::to_string(k));
      const auto* g = static_cast<const float*>(rd.tensor(p + "/dense/" + std::to_string(k), n));
      c.dense[KeyId(k)].assign(g, g + n);
    }
    for (auto [k, n] : rd.pairs(p + "/sparse")) {
      if (k < 0 || k >= int64_t(layout.size()) || !layout.key(KeyId(k)).sparse)
        rd.corrupt(p + " names sparse key " + std::to_string(k));
      const std::string q = p + "/sparse/" + std::to_string(k);
      const int64_t width = layout.key(KeyId(k)).width;
      SparseGrad& sg = c.sparse[KeyId(k)];
      sg.rows.resize(size_t(n));
      if (n > 0) std::memcpy(sg.rows.data(), rd.tensor(q + "/rows", 2 * n, DType::kI32), size_t(n) * 8);
      const auto* g = static_cast<const float*>(rd.tensor(q + "/g", n * width));
      sg.g.assign(g, g + n * width);
    }
    return c;
  };
  std::map<int64_t, Rounds::Round>& buffered = rounds.buffered();
  buffered.clear();
  for (int64_t r : rd.numbers("live/rounds")) {
    const std::string p = "live/round/" + std::to_string(r);
    Rounds::Round& round = buffered[r];
    round.clocked.assign(size_t(workers), false);
    round.n_clocked = 0;
    const std::vector<int64_t> clocked = rd.numbers(p + "/clocked", workers);
    for (int w = 0; w < workers; ++w) {
      round.clocked[size_t(w)] = clocked[size_t(w)] != 0;
      round.n_clocked += clocked[size_t(w)] != 0 ? 1 : 0;
    }
    round.by_worker.clear();
    for (int w = 0; w < workers; ++w) round.by_worker.push_back(contribution(p + "/w/" + std::to_string(w)));
    const std::vector<int64_t> folded = rd.numbers(p + "/folded", 1);
    for (int64_t i = 0; i < folded[0]; ++i)
      round.folded.push_back(contribution(p + "/f/" + std::to_string(i)));
  }
}

}  // namespace braid::ps
