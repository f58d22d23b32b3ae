// DataParallel's layout (layout.cc). Private to src/parallel/dp.
#pragma once

#include "parallel/dp/state.h"

namespace braid::parallel::dp {

class ZeroPolicy;

// Fills `s` (whose comm, opts, rank and world are set) for `model`: its
// units (nn::units_of), buckets in grad-ready order — about
// first_bucket_bytes, then bucket_bytes each, or one per unit when the
// policy asks — each padded to a multiple of the world size, rank 0's
// parameter values broadcast into them and placed by the policy, this
// rank's slices, and the optimizer's shard parameters when the policy
// shards the optimizer. Collective (the broadcasts).
void lay_out(State& s, ZeroPolicy& policy, nn::Module& model);

}  // namespace braid::parallel::dp
