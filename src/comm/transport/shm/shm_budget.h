// Shared memory a job needs on one host: what `braid doctor` holds /dev/shm
// against, from the same layout functions the transport and the chain
// all-reduce size their segments with (so the estimate follows
// BRAID_SHM_SLOT_BYTES, BRAID_SHM_SLOTS, BRAID_CHAIN_SLOT_BYTES and
// BRAID_CHAIN_SLOTS as a job would).
#pragma once

#include <cstddef>

namespace braid::comm {

struct ShmBudget {
  int ranks = 0;             // ranks on the host
  size_t segment_bytes = 0;  // one rank's shm-wire segment (an inbound ring per local peer)
  size_t p2p_segment_bytes = 0;  // the same for its point-to-point transport (fewer slots)
  size_t chain_bytes = 0;    // the world communicator's chain all-reduce segment
  // Every rank's two segments plus the chain's. A job's splits and its
  // alloc_shared buffers (data parallel's gradient buckets: 4 bytes per
  // parameter per rank) come on top.
  size_t total_bytes = 0;
};

// For `ranks` ranks on one host (a single rank needs none). Cheap; reads
// the environment.
ShmBudget shm_budget(int ranks);

}  // namespace braid::comm
