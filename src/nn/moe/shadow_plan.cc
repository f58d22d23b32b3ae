// The greedy shadow-expert plan (moe_shadow.h).
#include <algorithm>

#include "braid/error.h"
#include "braid/moe_shadow.h"

namespace braid::nn {

int64_t ShadowPlan::count() const {
  return int64_t(std::count(shadowed.begin(), shadowed.end(), char(1)));
}

namespace {

std::vector<int64_t> loads(const std::vector<int64_t>& counts, const std::vector<char>& shadowed,
                           int ranks, int64_t experts) {
  const int64_t per = experts / ranks;
  std::vector<int64_t> load(size_t(ranks), 0);
  for (int s = 0; s < ranks; ++s)
    for (int64_t e = 0; e < experts; ++e) {
      const int64_t c = counts[size_t(s * experts + e)];
      // A shadowed expert's rows stay with their rank; the others go to e's.
      load[size_t(shadowed[size_t(e)] ? s : int(e / per))] += c;
    }
  return load;
}

int most_loaded(const std::vector<int64_t>& load) {
  return int(std::max_element(load.begin(), load.end()) - load.begin());
}

}  // namespace

ShadowPlan plan_shadows(const std::vector<int64_t>& counts, int ranks, int64_t experts,
                        int64_t min_gain) {
  BRAID_CHECK_ARG(ranks >= 1 && experts >= 1 && experts % ranks == 0,
                  "MoE shadow plan: " + std::to_string(experts) + " experts over " +
                      std::to_string(ranks) + " ranks");
  BRAID_CHECK_ARG(counts.size() == size_t(ranks * experts),
                  "MoE shadow plan: " + std::to_string(counts.size()) + " counts for " +
                      std::to_string(ranks) + " ranks × " + std::to_string(experts) +
                      " experts");
  const int64_t per = experts / ranks;
  ShadowPlan p;
  p.shadowed.assign(size_t(experts), 0);
  p.load = loads(counts, p.shadowed, ranks, experts);
  if (ranks == 1) return p;
  for (;;) {
    const int r = most_loaded(p.load);
    int64_t best = -1, best_remote = 0;
    for (int64_t e = r * per; e < (r + 1) * per; ++e) {
      if (p.shadowed[size_t(e)]) continue;
      int64_t remote = 0;
      for (int s = 0; s < ranks; ++s)
        if (s != r) remote += counts[size_t(s * experts + e)];
      if (remote > best_remote) best = e, best_remote = remote;
    }
    if (best < 0) return p;
    p.shadowed[size_t(best)] = 1;
    std::vector<int64_t> next = loads(counts, p.shadowed, ranks, experts);
    if (p.load[size_t(r)] - next[size_t(most_loaded(next))] < std::max<int64_t>(min_gain, 1)) {
      p.shadowed[size_t(best)] = 0;
      return p;
    }
    p.load = std::move(next);
  }
}

}  // namespace braid::nn
