// Shared-memory wire between the processes of one host.
//
// Every rank owns one POSIX shm segment holding its doorbell (a futex word
// plus a "waiting" flag) and one inbound ring per same-host peer: `BRAID_SHM_SLOTS` slots (default 8) of
// `BRAID_SHM_SLOT_BYTES` payload bytes (default 512 KiB), head/tail counters
// on their own cache lines. A sender memcpys a chunk into a free slot and
// publishes it (store of head); the receiver copies it out (kRecv)
// or reduces straight out of the slot (kRecvReduce) and frees it. Large
// messages stream through the ring chunk by chunk, so sender and receiver
// copy concurrently and the data in flight stays in the shared cache.
//
// Messages of up to 4040 bytes (zero included) skip the ring: each direction
// also has 32 4-KiB "fast boxes" the receiver polls by stamp, so a small
// message costs one cache-line transfer (plus the lines its payload needs). A message on the unexpected
// channel is reported as a mismatch.
//
// Single copy (CMA, opt-in, off by default): large messages can instead be
// read straight from the sender's buffer with process_vm_readv; shm_wire_cma.cc
// describes how.
//
// Waiting spins on the rings themselves (head of each ring with a posted
// recv, tail of each ring with a posted send) for BRAID_SPIN_US (default 200
// µs, 2 µs when the host has more ranks than cores), then raises its waiting
// flag, re-checks the rings and FUTEX_WAITs on its doorbell (shared futex,
// 50 ms slices). A peer that publishes or frees a slot and then sees the
// flag up bumps the doorbell and FUTEX_WAKEs. The publish is a plain store,
// and the sleeper keeps looking for 5 µs after raising its flag, so one side
// sees the other (ShmWire::publish). While both sides
// are awake no doorbell traffic happens at all. Peer death is seen through pidfds (kill(pid,0) where
// pidfd_open is missing) checked during waits and every ~50 ms in progress().
//
// Segments are named /braid.<communicator token>.<rank> and unlinked as
// soon as every peer has mapped them.
//
// Files: shm_segment.h (the segment layout), shm_wire.h (the class), and
// its definitions by concern in shm_wire_setup.cc, shm_wire_send.cc,
// shm_wire_recv.cc, shm_wire_liveness.cc, shm_wire_progress.cc and
// shm_wire_cma.cc.
#pragma once

#include <memory>
#include <vector>

#include "comm/transport/wire.h"

namespace braid::comm {

// Collective over `peers` (ranks on this host, excluding this rank). Throws
// Error(kTimeout) naming a peer that did not appear, Error(kIo) when the
// segment cannot be created (e.g. /dev/shm full).
std::unique_ptr<Wire> make_shm_wire(const WireContext& ctx, const std::vector<int>& peers);

}  // namespace braid::comm
