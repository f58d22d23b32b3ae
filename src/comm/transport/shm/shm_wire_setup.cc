// Shared-memory wire, set-up: the segment's geometry from the environment,
// creating this rank's segment, mapping every local peer's, and tearing
// them down. shm_transport.h describes the protocol, shm_segment.h the
// segment layout, shm_wire.h the class whose other parts live in
// shm_wire_{send,recv,liveness,progress,cma}.cc.
#include "comm/transport/shm/shm_transport.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "braid/env.h"
#include "braid/error.h"
#include "braid/log.h"
#include "comm/transport/shm/shm_object.h"
#include "comm/transport/shm/shm_wire.h"
#include "comm/transport/shm/stream_copy.h"

namespace braid::comm {
namespace shm {
namespace {

int open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  return int(::syscall(SYS_pidfd_open, pid, 0));
#else
  errno = ENOSYS;
  return -1;
#endif
}

// Index of `sender`'s ring inside `owner`'s segment: rings are ordered by
// rank over the host group minus the owner.
size_t ring_index(const std::vector<int>& group, int owner, int sender) {
  size_t i = size_t(std::find(group.begin(), group.end(), sender) - group.begin());
  return sender > owner ? i - 1 : i;
}

size_t env_slot_bytes() {
  // 512 KiB: oversubscribed rings (more local ranks than cores) want few
  // hand-offs per byte, and 2 ranks lose nothing against 64-256 KiB slots.
  int64_t v = env_int("BRAID_SHM_SLOT_BYTES", 512 << 10);
  v = std::clamp<int64_t>(v, 4096, int64_t(64) << 20);
  return round_up(size_t(v), kLine);
}
// Default: 8 slots per ring, fewer when many peers would make a rank's
// segment pass 32 MiB (each rank holds one inbound ring per local peer).
size_t env_slots(size_t slot_bytes, size_t nrings, size_t max_slots) {
  size_t dflt = std::clamp<size_t>((size_t(32) << 20) / (std::max<size_t>(nrings, 1) * slot_bytes), 2, 8);
  size_t n = size_t(std::clamp<int64_t>(env_int("BRAID_SHM_SLOTS", int64_t(dflt)), 2, 4096));
  return max_slots >= 2 ? std::min(n, max_slots) : n;
}

// Slot copies of at least this many bytes bypass the sender's cache
// (BRAID_SHM_STREAM_BYTES; 0: never). With ordinary stores a piece sits
// modified in this core's cache and the reader pulls every line across from
// it; streaming stores hand it over through memory instead, which is faster
// for pieces from about 64 KiB up (the default). stream_copy's sfence orders the streamed lines before the store
// that publishes the slot (x86 keeps ordinary stores in order, not
// streaming ones).
size_t env_stream_bytes() { return env_min_bytes("BRAID_SHM_STREAM_BYTES", 64 << 10); }

}  // namespace

Layout env_layout(size_t nrings, size_t max_slots) {
  const size_t slot_bytes = env_slot_bytes();
  return Layout(slot_bytes, env_slots(slot_bytes, nrings, max_slots), nrings);
}

ShmWire::ShmWire(const WireContext& ctx, const std::vector<int>& peers)
    : Wire(ctx), layout_(env_layout(peers.size(), ctx.opt->max_shm_slots)) {
  std::vector<int> group = peers;
  group.push_back(ctx.rank);
  std::sort(group.begin(), group.end());
  wait_ = shm_wait_plan(int(group.size()), ctx.host_cores);
  index_.assign(size_t(ctx.size), -1);

  // Create, size, reserve, map and initialise my segment.
  name_ = "/braid." + ctx.token + "." + std::to_string(ctx.rank);
  const char* step = nullptr;
  uint8_t* base = shm_create(name_, layout_.total, &step);
  if (!base) {
    if (std::string(step) == "posix_fallocate")
      throw_errno("reserving " + std::to_string(layout_.total >> 10) +
                  " KiB of shared memory for " + name_ +
                  " (is /dev/shm full? lower BRAID_SHM_SLOT_BYTES or BRAID_SHM_SLOTS)");
    throw_errno(std::string(step) + " " + name_);
  }
  my_ = reinterpret_cast<SegHeader*>(base);
  my_->total_bytes = layout_.total;
  my_->slot_bytes = layout_.slot_bytes;
  my_->nslots = uint32_t(layout_.nslots);
  my_->nrings = uint32_t(layout_.nrings);
  my_->owner = ctx.rank;
  cma_bytes_ = env_cma_bytes();
  stream_bytes_ = env_stream_bytes();
  my_->cma_probe_word = ctx.peers[size_t(ctx.rank)].nonce | 1;
  my_->cma_probe_addr = uint64_t(reinterpret_cast<uintptr_t>(&my_->cma_probe_word));
  light_publish_ = env_int("BRAID_SHM_LIGHT_PUBLISH", 1) != 0;
  ordered_seqs_ = ctx.opt->ordered_seqs;
  my_->name_refs.store(uint32_t(peers.size()) + 1, std::memory_order_relaxed);
  my_->magic = kMagic;
  ctx.store->set_str("shm/ready/" + std::to_string(ctx.rank), std::to_string(layout_.total));

  // Every peer maps this segment during set-up; once all have, the name is
  // removed (the mappings stay), so a rank killed later leaves nothing in
  // /dev/shm. A set-up that fails removes it at once.
  try {
    peers_local_.resize(peers.size());
    for (size_t i = 0; i < peers.size(); ++i) {
      int q = peers[i];
      Peer& p = peers_local_[i];
      p.rank = q;
      p.pid = ctx.peers[size_t(q)].pid;
      index_[size_t(q)] = int(i);
      std::string key = "shm/ready/" + std::to_string(q);
      try {
        ctx.store->wait({key}, std::chrono::milliseconds(std::max<int64_t>(ctx.ms_left(), 1)));
      } catch (const Error& e) {
        if (e.code() != Errc::kTimeout) throw;
        throw Error(Errc::kTimeout, "rank " + std::to_string(ctx.rank) + ": shared-memory set-up timed out waiting for " +
                                        describe_peer_info(ctx.peers[size_t(q)]) +
                                        " to create its segment");
      }
      std::string qname = "/braid." + ctx.token + "." + std::to_string(q);
      size_t qlen = 0;
      uint8_t* qb = shm_attach(qname, &qlen, &step);
      if (!qb)
        throw_errno(std::string(step) + " " + qname + " (segment of " + describe_peer(q) + ")");
      p.seg = reinterpret_cast<SegHeader*>(qb);
      p.seg_len = qlen;
      const SegHeader& h = *p.seg;
      if (qlen < sizeof(SegHeader) || h.slot_bytes > (size_t(64) << 20) || h.nslots > 4096)
        throw Error(Errc::kProtocol, "shared-memory segment " + qname + " of " + describe_peer(q) + " is malformed");
      Layout ql(h.slot_bytes, h.nslots, h.nrings);
      if (h.magic != kMagic || h.owner != q ||
          h.nrings != peers.size() || ql.total != h.total_bytes || ql.total != qlen ||
          h.slot_bytes % kLine != 0 || h.slot_bytes == 0 || h.nslots < 2)
        throw Error(Errc::kProtocol, "shared-memory segment " + qname + " of " + describe_peer(q) +
                                         " has an unexpected layout (different braid versions?)");
      uint8_t* oring = ql.ring(qb, ring_index(group, q, ctx.rank));
      p.out = reinterpret_cast<RingCtl*>(oring);
      p.out_slots = oring + ql.ring_ctl;
      p.out_nslots = ql.nslots;
      p.out_slot_bytes = ql.slot_bytes;
      p.out_stride = ql.stride;
      uint8_t* iring = layout_.ring(my_, ring_index(group, ctx.rank, q));
      p.in = reinterpret_cast<RingCtl*>(iring);
      p.in_slots = iring + layout_.ring_ctl;
      if (p.seg->name_refs.fetch_sub(1, std::memory_order_acq_rel) == 1) ::shm_unlink(qname.c_str());
      p.pidfd = open_pidfd(p.pid);
      p.in->cma_ok.store(probe_cma(p), std::memory_order_release);
    }
  } catch (...) {
    for (const Peer& p : peers_local_) {
      if (p.seg) ::munmap(p.seg, p.seg_len);
      if (p.pidfd >= 0) ::close(p.pidfd);
    }
    peers_local_.clear();
    ::shm_unlink(name_.c_str());
    ::munmap(my_, layout_.total);
    my_ = nullptr;
    throw;
  }
  if (my_->name_refs.fetch_sub(1, std::memory_order_acq_rel) == 1) ::shm_unlink(name_.c_str());
  last_check_ns_ = now_ns();
}

ShmWire::~ShmWire() {
  for (Peer& p : peers_local_) {
    if (p.seg) ::munmap(p.seg, p.seg_len);
    if (p.pidfd >= 0) ::close(p.pidfd);
  }
  // A failed communicator removes its name, and a dead peer's: a rank that
  // died before every peer mapped its segment would otherwise leave the name
  // behind (unlinking a removed name is harmless).
  bool failed = my_ && my_->abort.claimed();
  for (const Peer& p : peers_local_) failed |= p.dead;
  if (failed) {
    ::shm_unlink(name_.c_str());
    const std::string prefix = name_.substr(0, name_.rfind('.') + 1);
    for (const Peer& p : peers_local_)
      if (p.dead) ::shm_unlink((prefix + std::to_string(p.rank)).c_str());
  }
  if (my_) ::munmap(my_, layout_.total);
}

}  // namespace shm

std::unique_ptr<Wire> make_shm_wire(const WireContext& ctx, const std::vector<int>& peers) {
  return std::make_unique<shm::ShmWire>(ctx, peers);
}

}  // namespace braid::comm
