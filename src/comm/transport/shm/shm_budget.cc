#include "braid/host.h"

#include "comm/algo/host_ring.h"
#include "comm/transport/shm/shm_segment.h"
#include "comm/transport/transport.h"

namespace braid::comm {

ShmBudget shm_budget(int ranks) {
  ShmBudget b;
  b.ranks = ranks;
  if (ranks < 2) return b;
  b.segment_bytes = shm::env_layout(size_t(ranks - 1)).total;
  b.p2p_segment_bytes = shm::env_layout(size_t(ranks - 1), kPointToPointShmSlots).total;
  b.chain_bytes = algo::chain_geometry(ranks).bytes;
  b.total_bytes = size_t(ranks) * (b.segment_bytes + b.p2p_segment_bytes) + b.chain_bytes;
  return b;
}

}  // namespace braid::comm
