// plan::search — every layout of a model on `devices` devices of a
// cluster that the fixed choices allow, estimated (plan_cost.h), those
// that fit in memory best first.
//
// Searched, unless fixed: tp over the powers of two up to a host's devices
// that divide heads and hidden; pp over the divisors of devices / tp up to
// the blocks; dp = devices / (tp·pp); mbs over the powers of two dividing
// the batch per replica; the schedule (gpipe, 1f1b, interleaved with 2 or 4
// virtual stages), recomputation (none, selective, full), sequence
// parallelism (with tp > 1) and ZeRO 0–3 (0–1 with pp > 1). Non-GPT models
// search dp (and ZeRO and mbs) only.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "braid/plan_cost.h"

namespace braid::plan {

struct SearchSpec {
  int devices = 1;
  int64_t batch = 1;
  std::optional<int> tp, pp, dp, mbs, virtual_stages, zero;
  std::optional<std::string> schedule;
  std::optional<Recompute> recompute;
  std::optional<bool> sequence_parallel;
};

struct SearchResult {
  std::vector<Estimate> fits;  // best (lowest step_s) first
  size_t considered = 0;       // layouts estimated
  size_t too_big = 0;          // estimated but over the device's memory
  // The smallest memory among those that did not fit (0 if none), to say
  // how far off the nearest was when nothing fits (for a layout whose floor
  // already overflowed, that floor: plan_cost.h's stop_if_unfit).
  double smallest_overflow_bytes = 0;
};

// Throws Error(kInvalidArgument) for a spec no layout can satisfy on its
// face (devices < 1, a fixed size that does not divide devices, ...).
SearchResult search(const ModelDesc& m, const Cluster& c, const SearchSpec& s);

// Why `best` beats `other`, in one line: the term of the step that differs
// most between them ("bubble 0.41 s vs 1.20 s"), with both layouts.
std::string why_wins(const Estimate& best, const Estimate& other);
// The largest term of one estimate's own step ("compute 71%").
std::string dominant_term(const Estimate& e);

}  // namespace braid::plan
