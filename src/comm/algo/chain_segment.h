// The chain all-reduce's shared segment (algo/chain_reduce.cc): its layout
// and its set-up. Rank 0's segment is, in order: a Header, one RankCtl per
// rank, one SlotCtl per slot, then the slots' data from a page boundary.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "comm/algo/context.h"
#include "comm/algo/host_ring.h"
#include "comm/transport/shm/abort_mark.h"

namespace braid::comm::algo {

// Its own namespace: the names are short and algo/ has other segments.
namespace chain {

constexpr uint64_t kMagic = 0x62726169642d6368ULL;  // "braid-ch"
constexpr uint32_t kSlots = 16;
constexpr uint64_t kSleepSliceNs = 20'000'000;
constexpr uint64_t kLivenessEveryNs = 100'000'000;
// Message steps of the set-up and hello rounds.
constexpr uint32_t kStepName = 1, kStepAck = 2, kStepVerdict = 3, kStepHello = 4;

struct Header {
  uint64_t magic;
  uint64_t slot_bytes;
  uint32_t nslots;
  uint32_t nranks;
  // Set by the first rank of all to fail; every rank's waits look at it.
  shm::AbortMark abort;
};
struct alignas(64) RankCtl {
  std::atomic<uint64_t> added;   // chunks this rank has added / copied out
  std::atomic<uint64_t> copied;  // (HostRing::chunks_done + k), for timeouts
};
struct alignas(64) SlotCtl {
  std::atomic<uint32_t> adds;   // n per use: ranks 0..n−1 in turn
  std::atomic<uint32_t> reads;  // n per use
  std::atomic<uint32_t> waiters;
};

inline size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }
inline size_t ranks_offset() { return round_up(sizeof(Header), 64); }
inline size_t slots_offset(int n) { return ranks_offset() + sizeof(RankCtl) * size_t(n); }
inline size_t data_offset(int n, uint32_t k) {
  return round_up(slots_offset(n) + sizeof(SlotCtl) * k, 4096);
}

inline Header* header(HostRing& h) { return reinterpret_cast<Header*>(h.base); }
inline RankCtl* ranks(HostRing& h) { return reinterpret_cast<RankCtl*>(h.base + ranks_offset()); }

}  // namespace chain

// Maps (or learns it cannot map) the communicator's segment: h.state ends
// kReady or kUnavailable, the same on every rank.
void chain_setup(Context& c, HostRing& h);

}  // namespace braid::comm::algo
