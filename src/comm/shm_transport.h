// Shared-memory wire between the processes of one host.
//
// Every rank owns one POSIX shm segment holding its doorbell (a futex word
// peers bump when they write it a slot or free one of its slots) and one
// inbound ring per same-host peer: `BRAID_SHM_SLOTS` slots (default 8) of
// `BRAID_SHM_SLOT_BYTES` payload bytes (default 128 KiB), head/tail counters
// on their own cache lines. A sender memcpys a chunk into a free slot and
// publishes it (release store of head); the receiver copies it out (kRecv)
// or reduces straight out of the slot (kRecvReduce) and frees it. Large
// messages stream through the ring chunk by chunk, so sender and receiver
// copy concurrently and the data in flight stays in the shared cache.
//
// Waiting spins on the doorbell for BRAID_SPIN_US, then FUTEX_WAITs on it
// (shared, with a timeout) after raising a waiter flag; peers FUTEX_WAKE only
// when the flag is up. Peer death is seen through pidfds (kill(pid,0) where
// pidfd_open is missing) checked during waits and every ~50 ms in progress().
//
// Segments are named /braid.<communicator token>.<rank> and unlinked as
// soon as every peer has mapped them.
#pragma once

#include <memory>
#include <vector>

#include "comm/transport_wire.h"

namespace braid::comm {

// Collective over `peers` (ranks on this host, excluding this rank). Throws
// Error(kTimeout) naming a peer that did not appear, Error(kIo) when the
// segment cannot be created (e.g. /dev/shm full).
std::unique_ptr<Wire> make_shm_wire(const WireContext& ctx, const std::vector<int>& peers);

}  // namespace braid::comm
