// The layout of a shm-wire segment: what one rank's POSIX shm object holds
// (a header with the doorbell and the abort mark, then one inbound ring per
// local peer: control lines, fast boxes and slots), shared by every part of
// ShmWire (shm_wire.h) and by the shared-memory budget (shm_budget.cc, braid/host.h).
// shm_transport.h describes the protocol.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "comm/transport/shm/abort_mark.h"
#include "comm/transport/transport.h"

namespace braid::comm::shm {

constexpr uint64_t kMagic = 0x314d534449415242ull;  // "BRAIDSM1"
constexpr size_t kLine = 64;
constexpr size_t kSlotHdr = 64;  // payload starts one cache line into a slot

struct SegHeader {
  uint64_t magic;
  uint64_t total_bytes;
  uint64_t slot_bytes;
  uint32_t nslots;
  uint32_t nrings;
  int32_t owner;
  // Single-copy probe: a peer reads the word at cma_probe_addr (this
  // segment, in the owner's address space) with process_vm_readv and
  // compares it with cma_probe_word, which it can also read here.
  uint64_t cma_probe_addr;
  uint64_t cma_probe_word;
  alignas(kLine) std::atomic<uint32_t> bell;     // bumped by peers of a sleeper; futex word
  alignas(kLine) std::atomic<uint32_t> waiting;  // owner is (about to be) asleep on bell
  // Set by the owner when its communicator fails (ShmWire::abort); peers
  // then fail what they have pending with its message (abort_mark.h).
  AbortMark abort;
  // Holders of the segment's name: each local peer until it has mapped the
  // segment, and the owner until its wire is destroyed. Whoever drops the
  // count to zero removes the name, so a peer slow to set up still finds a
  // segment whose owner has already finished and gone.
  alignas(kLine) std::atomic<uint32_t> name_refs;
  alignas(kLine) char end_[1];
};

// Fast box: small messages (up to kFastBytes, zero included) skip the slot
// ring. A box is 4 KiB (64 cache lines); the receiver polls the stamp in the
// first line, then pulls the payload's lines in parallel, so a small message
// costs one dependent line transfer instead of two (ring head, then slot).
// The stamp (the message's 1-based index on this pair) is written last.
// 4 KiB rather than 512 B: messages of 512 B to 4 KiB would otherwise take
// the ring's two dependent transfers; the boxes add 128 KiB per directed
// pair, against at least 1 MiB of slots.
// 32 boxes: the sender reads the receiver's consumed count (a cache line
// the receiver writes, so a cross-core transfer) once per kFastBoxes
// messages, so few boxes make that read a visible share of a small
// message's cost.
constexpr size_t kFastBoxes = 32;
struct FastBox {
  std::atomic<uint64_t> stamp;
  uint32_t len;
  uint32_t pad;
  MsgSig sig;
  uint8_t data[64 * kLine - 56];
};
constexpr size_t kFastBytes = sizeof(FastBox::data);
static_assert(sizeof(FastBox) == 64 * kLine);

// head: slots published by the sender; tail: slots freed by the receiver.
// Each on its own line so the two sides do not false-share.
struct RingCtl {
  alignas(kLine) std::atomic<uint64_t> head;
  alignas(kLine) std::atomic<uint64_t> tail;
  alignas(kLine) std::atomic<uint64_t> fb_tail;  // fast boxes consumed
  // Raised by a sender that found every fast box full: only then does the
  // receiver pay for a wake-up check after consuming one (a look at the
  // sender's doorbell on every small message would cost a cross-core line
  // transfer each).
  alignas(kLine) std::atomic<uint32_t> fb_blocked;
  // Single-copy messages (see shm_wire_cma.cc), both written by the
  // receiver: cma_ack counts the descriptors it has finished reading,
  // cma_ok is its probe's verdict (kCmaUnknown, kCmaOn, kCmaOff).
  alignas(kLine) std::atomic<uint64_t> cma_ack;
  std::atomic<uint32_t> cma_ok;
  alignas(kLine) FastBox fb[kFastBoxes];
  alignas(kLine) char end_[1];
};

struct SlotHdr {
  MsgSig sig;      // valid when first != 0
  uint32_t len;    // payload bytes in this slot
  uint32_t first;  // kContinue, kFirstSlot or kFirstCma
};
enum : uint32_t { kContinue = 0, kFirstSlot = 1, kFirstCma = 2 };
enum : uint32_t { kCmaUnknown = 0, kCmaOn = 1, kCmaOff = 2 };
// Payloads up to kInline bytes ride in the header's cache line, so a tiny
// message costs the receiver one line less to pull over.
constexpr size_t kInline = kSlotHdr - sizeof(SlotHdr);
static_assert(sizeof(SlotHdr) <= kSlotHdr);
inline size_t payload_off(size_t len) { return len <= kInline ? sizeof(SlotHdr) : kSlotHdr; }

inline size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

struct Layout {
  size_t slot_bytes, nslots, nrings, hdr_len, ring_ctl, stride, ring_len, total;
  Layout(size_t slot_bytes_, size_t nslots_, size_t nrings_)
      : slot_bytes(slot_bytes_), nslots(nslots_), nrings(nrings_) {
    hdr_len = round_up(sizeof(SegHeader), 4096);
    ring_ctl = round_up(sizeof(RingCtl), kLine);
    stride = kSlotHdr + slot_bytes;
    ring_len = round_up(ring_ctl + nslots * stride, 4096);
    total = hdr_len + nrings * ring_len;
  }
  uint8_t* ring(void* base, size_t i) const { return static_cast<uint8_t*>(base) + hdr_len + i * ring_len; }
};

// The layout of the segment a rank with `nrings` peers on its host makes:
// BRAID_SHM_SLOT_BYTES × BRAID_SHM_SLOTS per ring, or their defaults, with
// at most `max_slots` slots when that is 2 or more
// (TransportOptions::max_shm_slots).
Layout env_layout(size_t nrings, size_t max_slots = 0);


// Bytes per slot for a message of `bytes`: whole slots for large messages
// (fewer hand-offs, which is what oversubscribed ranks need), but at least
// four pieces of >= 128 KiB for mid-sized ones, so that the sender's copy in
// and the receiver's copy out overlap instead of taking turns. Both sides
// compute it from the message length in the signature.
inline uint64_t chunk_for(uint64_t slot_bytes, uint64_t bytes) {
  uint64_t piece = std::max<uint64_t>(uint64_t(128) << 10, round_up(size_t(bytes / 4), kLine));
  return std::min<uint64_t>(slot_bytes, piece);
}

}  // namespace braid::comm::shm
