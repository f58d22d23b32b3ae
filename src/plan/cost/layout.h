// The planner's checks of a layout (the public half is plan_cost.h's
// recompute_name, parse_recompute and layout_text).
#pragma once

#include <cstdint>

#include "braid/plan_cost.h"

namespace braid::plan {

// Throws Error(kInvalidArgument) naming the layout's field ("layout: tp:
// ...") when `l` cannot run `m` on `c` at global batch `batch`: sizes below
// one, a batch that dp × mbs does not divide, model parallelism of a
// non-GPT, tp across hosts or not dividing heads/hidden/vocab, sequence
// parallelism without tp, ZeRO-2/3 with pp, a schedule's constraints, more
// stages than blocks.
void validate_layout(const ModelDesc& m, const Cluster& c, const Layout& l, int64_t batch);

}  // namespace braid::plan
