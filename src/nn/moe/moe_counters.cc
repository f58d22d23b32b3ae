// The process-wide MoE counters (moe_counters.h).
#include "braid/moe_counters.h"

#include <algorithm>
#include <mutex>

namespace braid::nn {

namespace {
std::mutex g_mu;
MoeCounts g_counts;
}  // namespace

void moe_count_routing(const std::vector<int64_t>& per_expert, int64_t routed, int64_t dropped,
                       double aux_sum, int64_t groups) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_counts.tokens.size() < per_expert.size()) g_counts.tokens.resize(per_expert.size(), 0);
  for (size_t e = 0; e < per_expert.size(); ++e) g_counts.tokens[e] += per_expert[e];
  g_counts.routed += routed;
  g_counts.dropped += dropped;
  g_counts.aux_sum += aux_sum;
  g_counts.groups += groups;
  ++g_counts.forwards;
}

void moe_count_exchange(double seconds) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_counts.exchange_s += seconds;
}

void moe_count_shadows(int64_t shadows) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_counts.shadows += shadows;
}

MoeCounts moe_take_counts() {
  std::lock_guard<std::mutex> lock(g_mu);
  MoeCounts out = std::move(g_counts);
  g_counts = MoeCounts{};
  return out;
}

}  // namespace braid::nn
