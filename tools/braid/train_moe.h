// `braid train gpt`'s mixture-of-experts flags (--moe-experts, --moe-top-k,
// --moe-capacity, --moe-every, --moe-aux, --moe-shadow) and the per-step
// MoE record of its JSON log and progress: per-expert token counts,
// dropped choices, the load-balancing loss, the imbalance (max/mean tokens
// per expert), the shadow experts run and the expert-parallel all_to_all
// time (nn::moe_take_counts, summed over the
// job's ranks).
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "braid/comm.h"
#include "braid/moe.h"
#include "braid/moe_counters.h"

namespace braid::tool {

struct MoeFlags {
  int64_t experts = 0;
  int top_k = 1;
  double capacity = 1.25;
  int64_t every = 2;
  double aux = 0.01;
  int64_t shadow = 64;
};

inline void add_moe_options(CLI::App& app, MoeFlags& f) {
  app.add_option("--moe-experts", f.experts,
                 "gpt: experts per MoE layer (0: a dense GPT); see --moe-every");
  app.add_option("--moe-top-k", f.top_k, "gpt: experts each token goes to (1 or 2; default 1)");
  app.add_option("--moe-capacity", f.capacity,
                 "gpt: capacity factor: an expert takes at most ceil(F·T·k/E) tokens of a "
                 "sequence, the rest are dropped (1.25)");
  app.add_option("--moe-every", f.every, "gpt: every K-th block's MLP is an MoE (2)");
  app.add_option("--moe-aux", f.aux, "gpt: load-balancing loss coefficient (0.01)");
  app.add_option("--moe-shadow", f.shadow,
                 "gpt --ep: run a busy rank's expert on every rank (its weights lent, its "
                 "rows kept home) when that takes at least this many rows off the busiest "
                 "rank (64; 0: never)");
}

inline nn::MoeConfig moe_config(const MoeFlags& f) {
  nn::MoeConfig c;
  c.experts = f.experts;
  c.top_k = f.top_k;
  c.capacity_factor = float(f.capacity);
  c.every = f.every;
  c.aux_coef = float(f.aux);
  c.shadow_rows = f.shadow;
  return c;
}

// This step's MoE counters summed over `world` (null: this process alone;
// else collective: every rank calls it after each step), as a JSON object; null when the model has no
// experts. `step_s`: this rank's step time, for the exposed all_to_all
// share (the largest over ranks of all_to_all time over step time).
// `counted` false: this rank's routing repeats another's (a tensor-parallel
// replica of the MoE: tp rank > 0) and adds no tokens.
inline nlohmann::json moe_step_record(Communicator* world, int64_t experts, double step_s,
                                      bool counted = true) {
  if (experts <= 0) return nullptr;
  nn::MoeCounts c = nn::moe_take_counts();
  if (!counted) {
    nn::MoeCounts time_only;
    time_only.exchange_s = c.exchange_s;
    c = time_only;
  }
  std::vector<double> v(size_t(experts) + 6, 0.0);
  for (size_t e = 0; e < c.tokens.size() && e < size_t(experts); ++e) v[e] = double(c.tokens[e]);
  v[size_t(experts)] = double(c.routed);
  v[size_t(experts) + 1] = double(c.dropped);
  v[size_t(experts) + 2] = c.aux_sum;
  v[size_t(experts) + 3] = double(c.groups);
  v[size_t(experts) + 4] = double(c.forwards);
  v[size_t(experts) + 5] = double(c.shadows);
  double a2a[2] = {c.exchange_s, step_s > 0 ? c.exchange_s / step_s : 0.0};
  if (world != nullptr && world->size() > 1) {
    world->all_reduce(v.data(), v.data(), v.size(), DType::kF64, ReduceOp::kSum);
    world->all_reduce(a2a, a2a, 2, DType::kF64, ReduceOp::kMax);
  }
  std::vector<int64_t> tokens(static_cast<size_t>(experts), 0);
  double total = 0, most = 0;
  for (size_t e = 0; e < tokens.size(); ++e) {
    tokens[e] = int64_t(v[e]);
    total += v[e];
    most = std::max(most, v[e]);
  }
  const double mean = total / double(experts);
  const double groups = v[size_t(experts) + 3];
  return {{"tokens_per_expert", tokens},
          {"routed", int64_t(v[size_t(experts)])},
          {"dropped", int64_t(v[size_t(experts) + 1])},
          {"aux_loss", groups > 0 ? v[size_t(experts) + 2] / groups : 0.0},
          {"imbalance", mean > 0 ? most / mean : 0.0},
          {"shadows", int64_t(v[size_t(experts) + 5])},
          {"a2a_s", a2a[0]},
          {"a2a_fraction", a2a[1]}};
}

}  // namespace braid::tool
