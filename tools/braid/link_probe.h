// Probing each link class a job has, from rank 0: shared memory or TCP to
// a rank of its own host, TCP to a rank on another host (tuning.h's "shm",
// "tcp", "net"), each to rank 0's lowest peer of that class. Used by
// `braid bench --probe` (which caches the figures) and by `braid doctor`
// inside a job (which compares them with the cached ones).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "braid/comm.h"
#include "braid/plan_probe.h"
#include "braid/tuning.h"

namespace braid::tool {

struct ClassProbe {
  std::string kind;  // "shm", "tcp" or "net"
  int peer = -1;     // the rank 0 measured against
  comm::ProbeSample sample;  // rank 0's; zeros on the other ranks
};

// Collective over `comm` (≥ 2 ranks): ranks 0 and each class's peer
// measure their link in turn while the others wait. Every rank gets the
// classes and peers; only rank 0 the samples.
std::vector<ClassProbe> probe_each_class(Communicator& comm);

// Collective over `comm`: where rank 0 has a shared-memory peer (`probes`'
// "shm"), the two run plan::probe_memory while the others wait. Rank 0
// gets the sample; the other ranks, and jobs without such a pair, get
// nullopt.
std::optional<plan::MemorySample> probe_shm_memory(Communicator& comm,
                                                   const std::vector<ClassProbe>& probes);

}  // namespace braid::tool
