// The chain all-reduce's segment: its geometry, its set-up in the first
// chain call, and its release (chain_segment.h has the layout).
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>

#include "braid/env.h"
#include "braid/error.h"
#include "comm/algo/chain_segment.h"
#include "comm/transport/shm/shm_object.h"

namespace braid::comm::algo {

using namespace chain;

namespace {

// Writes to every data page of the segment through this rank's own
// mapping: populated shared pages still take a fault on a process's first
// write (~10 µs each on a VM), which would otherwise land on the first
// calls. The writes store zeros, so they must be over on every rank before
// any rank puts a chunk in a slot (setup's ordering below).
void prefault(HostRing& h, int n, uint32_t nslots) {
  for (size_t off = data_offset(n, nslots); off < h.len; off += 4096)
    reinterpret_cast<volatile uint8_t*>(h.base)[off] = 0;
}

}  // namespace

// BRAID_CHAIN_SLOT_BYTES, rounded to whole pages, and BRAID_CHAIN_SLOTS,
// both clamped. By default at least two slots per rank, so that all n
// stages of the chain can work on different chunks at once.
ChainGeometry chain_geometry(int n) {
  ChainGeometry g;
  g.slot_bytes = std::clamp<uint64_t>(
      round_up(size_t(std::max<int64_t>(env_int("BRAID_CHAIN_SLOT_BYTES", kChainSlotBytes), 1)), 4096),
      4096, uint64_t(64) << 20);
  g.nslots = uint32_t(std::clamp<int64_t>(
      env_int("BRAID_CHAIN_SLOTS", std::max<int64_t>(kSlots, 2 * int64_t(n))), 2, 4096));
  g.bytes = data_offset(n, g.nslots) + size_t(g.nslots) * g.slot_bytes;
  return g;
}

// Set-up, in the first chain call: rank 0 creates the segment and sends its
// name to every peer; each maps it and answers; rank 0 removes the name and
// tells everyone whether all could. Any rank with a peer not on shared
// memory answers no, so every rank ends in the same state.
//
// Each rank pre-faults the data pages before it answers (rank 0 before it
// sends the name), and rank 0 writes its first chunk only after it has
// every answer and has sent the verdict; every other rank's first write to
// a slot waits on rank 0's (the slot's adds counter). So every pre-fault's
// zeros are stored before any chunk is. A rank that pre-faulted after the
// verdict could still be walking its pages when rank 0 (which only waits
// for its predecessor's hello) had copied its first chunk in, and would
// zero the first byte of each page of it: the same wrong result on every
// rank.
void chain_setup(Context& c, HostRing& h) {
  const int n = c.size(), r = c.rank();
  const bool local = h.peers_on_shm;
  // Rank 0 picks the geometry; peers read it from the header.
  const ChainGeometry g = chain_geometry(n);
  const uint64_t slot_bytes = g.slot_bytes;
  const uint32_t nslots = g.nslots;
  char name[64] = {};
  uint32_t ok = 0;
  if (r == 0) {
    if (local) {
      std::random_device rd;
      std::snprintf(name, sizeof name, "/braid-chain-%d-%08x", int(::getpid()), unsigned(rd()));
      const char* step = nullptr;
      const size_t len = g.bytes;
      h.base = shm_create(name, len, &step);
      if (h.base) {
        h.len = len;
        auto* hd = new (h.base) Header{};
        hd->magic = kMagic;
        hd->slot_bytes = slot_bytes;
        hd->nslots = nslots;
        hd->nranks = uint32_t(n);
        for (int p = 0; p < n; ++p) new (&ranks(h)[p]) RankCtl{};
        for (uint32_t s = 0; s < nslots; ++s)
          new (h.base + slots_offset(n) + sizeof(SlotCtl) * s) SlotCtl{};
        prefault(h, n, nslots);
      } else {
        name[0] = 0;
      }
    }
    for (int p = 1; p < n; ++p) c.send(p, name, sizeof name, kStepName);
    c.wait_all();
    std::vector<uint32_t> acks(size_t(n), 0);
    for (int p = 1; p < n; ++p) c.recv(p, &acks[size_t(p)], sizeof(uint32_t), kStepAck);
    c.wait_all();
    if (name[0]) ::shm_unlink(name);
    ok = h.base != nullptr;
    for (int p = 1; p < n; ++p) ok &= acks[size_t(p)];
    for (int p = 1; p < n; ++p) c.send(p, &ok, sizeof ok, kStepVerdict);
    c.wait_all();
  } else {
    c.wait(c.recv(0, name, sizeof name, kStepName));
    name[sizeof name - 1] = 0;
    uint32_t ack = 0;
    if (name[0] && local) {
      const char* step = nullptr;
      size_t got = 0;
      h.base = shm_attach(name, &got, &step);
      if (h.base) {
        h.len = got;
        const Header* hd = header(h);
        ack = got >= sizeof(Header) && hd->magic == kMagic && hd->nranks == uint32_t(n) &&
              hd->nslots >= 2 && hd->nslots <= 4096 && hd->slot_bytes % 4096 == 0 &&
              hd->slot_bytes > 0 && hd->slot_bytes <= (uint64_t(64) << 20) &&
              got == data_offset(n, hd->nslots) + size_t(hd->nslots) * hd->slot_bytes;
        if (ack) prefault(h, n, hd->nslots);
      }
    }
    c.send(0, &ack, sizeof ack, kStepAck);
    c.wait_all();
    c.wait(c.recv(0, &ok, sizeof ok, kStepVerdict));
  }
  if (!ok) {
    if (h.base) ::munmap(h.base, h.len);
    h.base = nullptr;
    h.state = HostRing::State::kUnavailable;
    return;
  }
  h.slot_bytes = header(h)->slot_bytes;
  h.nslots = header(h)->nslots;
  h.wait = shm_wait_plan(n, c.host_cores());
  h.state = HostRing::State::kReady;
}

HostRing::~HostRing() {
  if (base) ::munmap(base, len);
}

}  // namespace braid::comm::algo
