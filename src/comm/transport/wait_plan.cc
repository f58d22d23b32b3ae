// The default wait policies (wait_plan.h) and their BRAID_SPIN_US /
// BRAID_YIELD_US overrides.
#include "comm/transport/wait_plan.h"

#include "braid/env.h"

namespace braid::comm {

uint64_t spin_ns_for(int local_ranks, int cores) {
  int64_t us = env_int("BRAID_SPIN_US", -1);
  if (us >= 0) return uint64_t(us) * 1000;
  // With more ranks than cores, a spinning rank steals the core the peer it
  // waits for needs: yield after 2 µs. With a core per rank, spinning costs
  // nobody, and sleeping costs a futex wake-up and a cold core on resume:
  // waits here are mostly the peer's step-to-step jitter (a fraction of a
  // millisecond in data-parallel training), which a 200 µs spin covers
  // where a short one sleeps. Longer waits still sleep.
  return local_ranks <= cores ? 200'000 : 2'000;
}

ShmWaitPlan shm_wait_plan(int local_ranks, int cores) {
  ShmWaitPlan w;
  const int64_t us = env_int("BRAID_YIELD_US", -1);
  w.yield_ns = us >= 0 ? uint64_t(us) * 1000 : local_ranks > cores ? 200'000 : 0;
  w.spin_ns = w.yield_ns > 0 && !env_str("BRAID_SPIN_US") ? 0 : spin_ns_for(local_ranks, cores);
  return w;
}

}  // namespace braid::comm
