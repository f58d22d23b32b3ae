// The collective algorithms, one file each under src/comm/algo/. Each file's
// top comment gives the schedule step by step and its α-β cost, with
// n ranks, N bytes, α the per-message latency, β the time per byte on the
// wire and γ the time per byte of reduction; the same file adds the
// algorithms to the registry (registry.h) with that cost as code.
//
// Conventions: buffers are in elements of ctx.dtype(); `send` may equal
// `recv` (in place); avg is reduced as sum and divided once by n.
#pragma once

#include <cstddef>
#include <vector>

#include "comm/algo/context.h"
#include "comm/transport/shm/shared_memory.h"

namespace braid::comm::algo {

// ring.cc
void all_reduce_ring(Context& c, const void* send, void* recv, size_t count, size_t chunk_bytes);
void reduce_ring(Context& c, const void* send, void* recv, size_t count, int root,
                 size_t chunk_bytes);
void all_gather_ring(Context& c, const void* send, void* recv, size_t count, size_t chunk_bytes);
void reduce_scatter_ring(Context& c, const void* send, void* recv, size_t count,
                         size_t chunk_bytes);
// Ring all-gather of uneven blocks: block j = [offs[j], offs[j+1]) elements
// of buf is present at rank j; afterwards every rank has all blocks. With
// own_src, this rank's block is not in buf yet: it is sent from own_src and
// copied into buf by the same sends (one read of the source instead of two).
void ring_gather_blocks(Context& c, void* buf, const std::vector<size_t>& offs,
                        size_t chunk_bytes, uint32_t step_base, const void* own_src = nullptr);

// halving_doubling.cc
void all_reduce_hd(Context& c, const void* send, void* recv, size_t count);
void all_reduce_rd(Context& c, const void* send, void* recv, size_t count);

// tree.cc
void broadcast_tree(Context& c, void* buf, size_t count, int root);
void reduce_tree(Context& c, const void* send, void* recv, size_t count, int root);

// chain.cc
void broadcast_chain(Context& c, void* buf, size_t count, int root, size_t chunk_bytes);

// direct.cc
void all_reduce_direct(Context& c, const void* send, void* recv, size_t count,
                       size_t chunk_bytes);
void all_reduce_oneshot(Context& c, const void* send, void* recv, size_t count);
void reduce_scatter_direct(Context& c, const void* send, void* recv, size_t count);
void reduce_direct(Context& c, const void* send, void* recv, size_t count, int root);
void gather_direct(Context& c, const void* send, void* recv, size_t count, int root);
void scatter_direct(Context& c, const void* send, void* recv, size_t count, int root);
void all_to_all_v_direct(Context& c, const void* send, const std::vector<size_t>& scounts,
                         const std::vector<size_t>& sdispls, void* recv,
                         const std::vector<size_t>& rcounts, const std::vector<size_t>& rdispls);
void all_gather_direct(Context& c, const void* send, void* recv, size_t count);

// shared.cc: buffers in memory every peer maps (Communicator::alloc_shared).
// all_reduce and all_gather: `span` locates recv; reduce_scatter: send.
void all_reduce_shared(Context& c, const SharedSpan& span, const void* send, void* recv,
                       size_t count);
void reduce_scatter_shared(Context& c, const SharedSpan& span, const void* send, void* recv,
                           size_t count);
void all_gather_shared(Context& c, const SharedSpan& span, const void* send, void* recv,
                       size_t count);

// chain_reduce.cc: ranks that all share memory fold each chunk in rank
// order into a shared slot and copy it out. The registry runs it only when
// every peer is on shared memory; if the segment still cannot be set up
// (some rank cannot map it, /dev/shm full), every rank learns so in the
// same call and runs the ring instead (host_ring.h).
struct HostRing;
void all_reduce_chain(Context& c, HostRing& h, const void* send, void* recv, size_t count,
                      size_t chunk_bytes);

// barrier.cc
void barrier_dissemination(Context& c);

// Shared helpers (ring.cc).
void copy_if_distinct(void* dst, const void* src, size_t bytes);
// The same for a block the call does not read again: written past the
// cache when the call's output on this rank (out_bytes) is large
// (stream_copy.h).
void copy_final_if_distinct(void* dst, const void* src, size_t bytes, size_t out_bytes);
void finish_avg(Context& c, void* buf, size_t count);  // divides by n when op is avg

}  // namespace braid::comm::algo
