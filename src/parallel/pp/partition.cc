// Contiguous split of a model's layers into stages with the smallest
// largest stage cost (the linear-partition problem), by dynamic
// programming over (layers used, stages used): O(stages × layers²).
#include <algorithm>
#include <cstdio>
#include <limits>

#include "braid/error.h"
#include "braid/partition.h"

namespace braid::parallel {

std::vector<size_t> partition_layers(const std::vector<double>& cost, int stages) {
  const size_t n = cost.size();
  BRAID_CHECK_ARG(stages >= 1 && size_t(stages) <= n,
                  "pipeline: cannot cut " + std::to_string(n) + " layers into " +
                      std::to_string(stages) + " non-empty stages");
  std::vector<double> prefix(n + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    BRAID_CHECK_ARG(cost[i] >= 0, "pipeline: layer " + std::to_string(i) + " has a negative cost");
    prefix[i + 1] = prefix[i] + cost[i];
  }
  const double inf = std::numeric_limits<double>::infinity();
  const size_t S = size_t(stages);
  // best[k][i]: smallest largest stage cost over the first i layers in k
  // stages; cut[k][i]: where the k-th stage begins in that split.
  std::vector<std::vector<double>> best(S + 1, std::vector<double>(n + 1, inf));
  std::vector<std::vector<size_t>> cut(S + 1, std::vector<size_t>(n + 1, 0));
  best[0][0] = 0;
  for (size_t k = 1; k <= S; ++k)
    for (size_t i = k; i <= n - (S - k); ++i)
      for (size_t j = k - 1; j < i; ++j) {
        const double v = std::max(best[k - 1][j], prefix[i] - prefix[j]);
        if (v < best[k][i]) {
          best[k][i] = v;
          cut[k][i] = j;
        }
      }
  std::vector<size_t> bounds(S + 1, 0);
  bounds[S] = n;
  for (size_t k = S; k >= 1; --k) bounds[k - 1] = cut[k][bounds[k]];
  return bounds;
}

std::string format_partition(const std::vector<double>& cost, const std::vector<size_t>& bounds) {
  bool ok = bounds.size() >= 2 && bounds.front() == 0 && bounds.back() == cost.size();
  for (size_t k = 1; ok && k < bounds.size(); ++k) ok = bounds[k - 1] < bounds[k];
  BRAID_CHECK_ARG(ok, "pipeline: " + std::to_string(bounds.size()) +
                          " stage bounds do not cut " + std::to_string(cost.size()) +
                          " layers into non-empty stages");
  std::string out;
  for (size_t k = 0; k + 1 < bounds.size(); ++k) {
    double sum = 0;
    for (size_t i = bounds[k]; i < bounds[k + 1]; ++i) sum += cost[i];
    char line[128];
    std::snprintf(line, sizeof line, "stage %zu: layers [%zu, %zu), predicted %.3f ms\n", k,
                  bounds[k], bounds[k + 1], sum * 1e3);
    out += line;
  }
  return out;
}

}  // namespace braid::parallel
