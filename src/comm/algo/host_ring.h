// HostRing: the shared accumulator ring of the chain all-reduce
// (src/comm/algo/chain_reduce.cc), one per communicator.
//
// Rank 0 creates the segment during the first chain all-reduce and every
// peer maps it; it lives until the communicator is destroyed. When some
// rank cannot map it (a peer over TCP, /dev/shm full), every rank learns so
// in the same call and the chain falls back to the ring from then on.
#pragma once

#include <cstddef>
#include <cstdint>

#include "comm/transport/wire.h"

namespace braid::comm::algo {

// The default slot (chunk) size; BRAID_CHAIN_SLOT_BYTES overrides it. The
// selector's cost model assumes it.
constexpr size_t kChainSlotBytes = 512 << 10;

// The segment of a communicator of n ranks: its slots, and its size in
// bytes (header and control blocks included). Rank 0's environment decides.
struct ChainGeometry {
  uint64_t slot_bytes = 0;
  uint32_t nslots = 0;
  size_t bytes = 0;
};
ChainGeometry chain_geometry(int n);

struct HostRing {
  enum class State : uint8_t { kUnset, kReady, kUnavailable };
  State state = State::kUnset;
  // Every peer is on the shm wire (set by the communicator): only then can
  // set-up succeed.
  bool peers_on_shm = false;
  uint8_t* base = nullptr;  // the mapped segment
  size_t len = 0;
  size_t slot_bytes = 0;
  uint32_t nslots = 0;
  ShmWaitPlan wait;  // how a wait polls before it sleeps (shm_wait_plan)
  // Chunks this communicator has passed through the ring, the same on every
  // rank: chunk k of the next call uses slot (chunks_done + k) mod nslots.
  uint64_t chunks_done = 0;

  HostRing() = default;
  HostRing(const HostRing&) = delete;
  HostRing& operator=(const HostRing&) = delete;
  ~HostRing();
};

}  // namespace braid::comm::algo
