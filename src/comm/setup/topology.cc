#include "braid/topology.h"

#include <algorithm>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "braid/error.h"

namespace braid {
namespace {

// Score of a ring: (bottleneck, total), compared lexicographically.
struct Score {
  double bottleneck = -1, total = -1;
  bool operator<(const Score& o) const {
    return bottleneck < o.bottleneck || (bottleneck == o.bottleneck && total < o.total);
  }
};

Score score(const std::vector<std::vector<double>>& bw, const std::vector<int>& ring) {
  Score s{std::numeric_limits<double>::infinity(), 0};
  for (size_t i = 0; i < ring.size(); ++i) {
    double b = bw[ring[i]][ring[(i + 1) % ring.size()]];
    s.bottleneck = std::min(s.bottleneck, b);
    s.total += b;
  }
  return s;
}

std::vector<int> exact(const std::vector<std::vector<double>>& bw) {
  const int n = int(bw.size());
  const int full = 1 << n;
  // best[mask][last]: best path from 0 through `mask` ending at `last`.
  std::vector<Score> best(size_t(full) * n);
  std::vector<int8_t> from(size_t(full) * n, -1);
  best[1 * n + 0] = Score{std::numeric_limits<double>::infinity(), 0};
  for (int mask = 1; mask < full; mask += 2) {
    for (int last = 0; last < n; ++last) {
      const Score& cur = best[size_t(mask) * n + last];
      if (cur.bottleneck < 0 || !(mask & (1 << last))) continue;
      for (int nx = 1; nx < n; ++nx) {
        if (mask & (1 << nx)) continue;
        double b = bw[last][nx];
        Score cand{std::min(cur.bottleneck, b), cur.total + b};
        Score& slot = best[size_t(mask | (1 << nx)) * n + nx];
        if (slot < cand) {
          slot = cand;
          from[size_t(mask | (1 << nx)) * n + nx] = int8_t(last);
        }
      }
    }
  }
  Score top;
  int last_best = -1;
  for (int last = 1; last < n; ++last) {
    const Score& s = best[size_t(full - 1) * n + last];
    if (s.bottleneck < 0) continue;
    double b = bw[last][0];
    Score closed{std::min(s.bottleneck, b), s.total + b};
    if (top < closed) {
      top = closed;
      last_best = last;
    }
  }
  std::vector<int> ring;
  int mask = full - 1, cur = last_best;
  while (cur > 0) {
    ring.push_back(cur);
    int prev = from[size_t(mask) * n + cur];
    mask &= ~(1 << cur);
    cur = prev;
  }
  ring.push_back(0);
  std::reverse(ring.begin(), ring.end());
  return ring;
}

std::vector<int> greedy_2opt(const std::vector<std::vector<double>>& bw) {
  const int n = int(bw.size());
  std::vector<int> ring{0};
  std::vector<bool> used(n, false);
  used[0] = true;
  for (int k = 1; k < n; ++k) {
    int last = ring.back(), pick = -1;
    for (int j = 0; j < n; ++j)
      if (!used[j] && (pick < 0 || bw[last][j] > bw[last][pick])) pick = j;
    used[pick] = true;
    ring.push_back(pick);
  }
  bool improved = true;
  while (improved) {
    improved = false;
    for (int i = 1; i < n - 1 && !improved; ++i)
      for (int j = i + 1; j < n && !improved; ++j) {
        std::vector<int> cand = ring;
        std::reverse(cand.begin() + i, cand.begin() + j + 1);
        if (score(bw, ring) < score(bw, cand)) {
          ring = cand;
          improved = true;
        }
      }
  }
  return ring;
}

}  // namespace

std::vector<int> ring_order_from_bandwidth(const std::vector<std::vector<double>>& bw) {
  const size_t n = bw.size();
  for (auto& row : bw)
    if (row.size() != n)
      throw Error(Errc::kInvalidArgument, "ring_order_from_bandwidth: matrix is not square (" +
                                              std::to_string(n) + " rows, a row of " +
                                              std::to_string(row.size()) + ")");
  if (n <= 3) {
    std::vector<int> r(n);
    for (size_t i = 0; i < n; ++i) r[i] = int(i);
    return r;
  }
  // Symmetrise: a ring uses each link in both directions.
  std::vector<std::vector<double>> s(n, std::vector<double>(n));
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j) s[i][j] = std::min(bw[i][j], bw[j][i]);
  return n <= 16 ? exact(s) : greedy_2opt(s);
}

std::vector<std::vector<double>> parse_bandwidth_matrix(const std::string& text, const std::string& from) {
  try {
    return nlohmann::json::parse(text).get<std::vector<std::vector<double>>>();
  } catch (const std::exception& e) {
    throw Error(Errc::kInvalidArgument, "BRAID_TOPOLOGY " + from + ": " + e.what());
  }
}

std::vector<int> ring_order_from_hosts(const std::vector<std::string>& hosts) {
  std::map<std::string, int> first;
  for (size_t r = 0; r < hosts.size(); ++r) first.emplace(hosts[r], int(r));
  std::vector<int> ring(hosts.size());
  for (size_t r = 0; r < hosts.size(); ++r) ring[r] = int(r);
  std::stable_sort(ring.begin(), ring.end(),
                   [&](int a, int b) { return first[hosts[a]] < first[hosts[b]]; });
  return ring;
}

double ring_bottleneck(const std::vector<std::vector<double>>& bw, const std::vector<int>& ring) {
  return score(bw, ring).bottleneck;
}

}  // namespace braid
