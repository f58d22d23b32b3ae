// The two-rank shared-memory set-up that the shm_ring target fuzzes and
// record_seeds records a real sender's ring writes with: 4 slots of 4 KiB
// per ring, one host, both ranks this process. One rank is a real ShmWire;
// the other is played by the caller, whose segment segment() makes as
// ShmWire's set-up does (comm/transport/shm/shm_wire_setup.cc).
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "braid/env.h"
#include "braid/error.h"
#include "comm/transport/shm/shm_object.h"
#include "comm/transport/shm/shm_segment.h"
#include "comm/transport/wire.h"

namespace braid::fuzz {

constexpr size_t kShmSlotBytes = 4096;  // the smallest slot BRAID_SHM_SLOT_BYTES allows
constexpr size_t kShmSlots = 4;

inline comm::shm::Layout shm_layout() { return comm::shm::Layout(kShmSlotBytes, kShmSlots, 1); }

// Rank `rank` of two, on one host, with a fresh token; opt must outlive it.
inline comm::WireContext shm_context(int rank, Store* store, comm::TransportOptions* opt) {
  ::setenv("BRAID_SHM_SLOT_BYTES", std::to_string(kShmSlotBytes).c_str(), 1);
  opt->max_shm_slots = kShmSlots;
  opt->ordered_seqs = true;
  static uint64_t n = 0;  // a name of its own per use: a segment left over is never reused
  comm::WireContext ctx;
  ctx.rank = rank;
  ctx.size = 2;
  ctx.store = store;
  ctx.opt = opt;
  ctx.token = "fz" + std::to_string(::getpid()) + "x" + std::to_string(n++);
  ctx.deadline_ns = now_ns() + 2'000'000'000ull;
  for (int r = 0; r < 2; ++r) {
    comm::PeerInfo p;
    p.rank = r;
    p.pid = ::getpid();
    p.host = p.host_id = "fuzz-host";
    p.nonce = 0x1234 + uint64_t(r);
    ctx.peers.push_back(p);
  }
  return ctx;
}

inline std::string shm_name(const comm::WireContext& ctx, int rank) {
  return "/braid." + ctx.token + "." + std::to_string(rank);
}

// The segment of `owner` (the caller's rank), as its ShmWire would make it,
// mapped; the caller unmaps and unlinks it.
inline uint8_t* shm_segment(const comm::WireContext& ctx, int owner) {
  using namespace comm::shm;
  const Layout l = shm_layout();
  const std::string name = shm_name(ctx, owner);
  const char* step = nullptr;
  uint8_t* base = comm::shm_create(name, l.total, &step);
  if (!base) throw_errno(std::string(step) + " " + name);  // the machine's fault, not an input's
  SegHeader* h = reinterpret_cast<SegHeader*>(base);
  h->total_bytes = l.total;
  h->slot_bytes = l.slot_bytes;
  h->nslots = uint32_t(l.nslots);
  h->nrings = uint32_t(l.nrings);
  h->owner = owner;
  h->cma_probe_word = ctx.peers[size_t(owner)].nonce | 1;
  h->cma_probe_addr = uint64_t(reinterpret_cast<uintptr_t>(&h->cma_probe_word));
  h->name_refs.store(2, std::memory_order_relaxed);
  h->magic = kMagic;
  return base;
}

// The shm_ring target's input flags (its first byte).
enum : uint8_t { kShmBadHeader = 1, kShmAbortMark = 2, kShmReduce = 4, kShmSingleCopy = 8 };

// The message the target's receive expects (a reducing one: f32).
inline comm::MsgSig shm_sig(uint64_t bytes, bool reduce) {
  comm::MsgSig s;
  s.seq = 1;
  s.count = reduce ? bytes / 4 : bytes;
  s.bytes = bytes;
  s.op = comm::CollOp::kAllReduce;
  s.dtype = reduce ? DType::kF32 : DType::kU8;
  return s;
}

// A target input whose ring part is what a sender wrote into `ring`
// (flags without kShmBadHeader or kShmAbortMark): the order in which the
// target reads it.
inline std::vector<uint8_t> shm_ring_input(uint8_t flags, uint16_t bytes, const uint8_t* ring) {
  using namespace comm::shm;
  const Layout l = shm_layout();
  const RingCtl* ctl = reinterpret_cast<const RingCtl*>(ring);
  std::vector<uint8_t> v{flags};
  auto put = [&](const void* p, size_t n) {
    const uint8_t* b = static_cast<const uint8_t*>(p);
    v.insert(v.end(), b, b + n);
  };
  put(&bytes, 2);
  const uint64_t head = ctl->head.load();
  const uint32_t blocked = ctl->fb_blocked.load();
  put(&head, 8);
  put(&blocked, 4);
  for (size_t b = 0; b < 2; ++b) {
    put(&ctl->fb[b].len, 8);
    put(&ctl->fb[b].sig, sizeof ctl->fb[b].sig);
    const uint64_t stamp = ctl->fb[b].stamp.load();
    put(&stamp, 8);
  }
  for (size_t s = 0; s < kShmSlots; ++s) put(ring + l.ring_ctl + s * l.stride, kSlotHdr);
  return v;
}

}  // namespace braid::fuzz
