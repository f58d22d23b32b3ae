// Shared-memory wire: set-up, slot rings, fast boxes, progress and waiting.
// shm_transport.h describes the protocol, shm_wire.h the segment layout,
// shm_cma.cc the opt-in single-copy path.
#include "comm/transport/shm/shm_transport.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "braid/env.h"
#include "braid/error.h"
#include "braid/log.h"
#include "braid/reduce.h"
#include "comm/transport/shm/shm_object.h"
#include "comm/transport/shm/shm_wire.h"
#include "comm/transport/shm/stream_copy.h"

namespace braid::comm {
namespace shm {
namespace {

constexpr uint64_t kLivenessEveryNs = 50'000'000;
constexpr uint64_t kSleepSliceNs = 50'000'000;
// How long a rank about to sleep keeps looking after raising its waiting
// flag: far longer than a store takes to leave a core's store buffer (the
// line's trip from the polling peer, 0.1-0.4 µs on this VM). Should one ever
// take longer, that message waits for the sleep slice to end.
constexpr uint64_t kPublishGraceNs = 5'000;

// Bytes per slot for a message of `bytes`: whole slots for large messages
// (fewer hand-offs, which is what oversubscribed ranks need), but at least
// four pieces of >= 128 KiB for mid-sized ones, so that the sender's copy in
// and the receiver's copy out overlap instead of taking turns. Both sides
// compute it from the message length in the signature.
uint64_t chunk_for(uint64_t slot_bytes, uint64_t bytes) {
  uint64_t piece = std::max<uint64_t>(uint64_t(128) << 10, round_up(size_t(bytes / 4), kLine));
  return std::min<uint64_t>(slot_bytes, piece);
}

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
  // 512 KiB measured best for oversubscribed rings (4-8 ranks on 2 cores: fewer
  // hand-offs per byte) and no worse than 64-256 KiB for 2 ranks.
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
// it; streaming stores hand it over through memory instead, which measured
// faster here for pieces of 64 KiB and up: 2-rank all_to_all +10-20 % at
// 1-8 MiB, all_reduce +10-17 %, broadcast +20-40 %, all_gather +10-40 % at
// 1-64 MiB (2026-11-22, three and two rounds alternating). stream_copy's
// sfence orders the streamed lines before the store that publishes the slot
// (x86 keeps ordinary stores in order, not streaming ones).
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
  my_->magic = kMagic;
  ctx.store->set_str("shm/ready/" + std::to_string(ctx.rank), std::to_string(layout_.total));

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
    // The last rank to map a segment removes its name.
    if (ctx.store->add("shm/opened/" + std::to_string(q), 1) == int64_t(peers.size()))
      ::shm_unlink(qname.c_str());
    p.pidfd = open_pidfd(p.pid);
    p.in->cma_ok.store(probe_cma(p), std::memory_order_release);
  }
  last_check_ns_ = now_ns();
}

ShmWire::~ShmWire() {
  for (Peer& p : peers_local_) {
    if (p.seg) ::munmap(p.seg, p.seg_len);
    if (p.pidfd >= 0) ::close(p.pidfd);
  }
  if (my_) ::munmap(my_, layout_.total);
  ::shm_unlink(name_.c_str());  // if some peer never mapped it
}

void ShmWire::post(Request* r) {
  Peer& p = peers_local_[size_t(index_[size_t(r->peer)])];
  (r->kind == Request::Kind::kSend ? p.sends : p.recvs).push(r);
  ++npending_;
  // A small send with nothing ahead of it goes out now, not at the next
  // progress(): the peer of a latency-bound exchange sees it one
  // receive-post, wait and progress round earlier.
  if (r->kind == Request::Kind::kSend && p.sends.size() == 1 && is_fast(r, p.send_started))
    send_some(p, 1);
}

size_t ShmWire::send_some(Peer& p, int max_slots) {
  size_t moved = complete_cma_sends(p);
  while (!p.sends.empty() && may_send_front(p)) {
    Request* r = p.sends.front();
    const uint64_t bytes = r->sig.bytes;
    if (is_fast(r, p.send_started)) {
      if (max_slots-- == 0) return moved;
      if (p.fb_head - p.fb_tail_seen >= kFastBoxes) {
        p.fb_tail_seen = p.out->fb_tail.load(std::memory_order_acquire);
        if (p.fb_head - p.fb_tail_seen >= kFastBoxes) {
          // Full: ask the receiver to wake us, then look once more (the
          // seq_cst pair guarantees one side sees the other).
          p.out->fb_blocked.store(1, std::memory_order_seq_cst);
          p.fb_tail_seen = p.out->fb_tail.load(std::memory_order_seq_cst);
          if (p.fb_head - p.fb_tail_seen >= kFastBoxes) return moved;
        }
        if (p.out->fb_blocked.load(std::memory_order_relaxed))
          p.out->fb_blocked.store(0, std::memory_order_relaxed);
      }
      FastBox& b = p.out->fb[p.fb_head % kFastBoxes];
      b.len = uint32_t(bytes);
      b.sig = r->sig;
      if (bytes) std::memcpy(b.data, r->src, bytes);
      publish(b.stamp, ++p.fb_head);
      if (r->copy_to != nullptr && bytes) std::memcpy(r->copy_to, r->src, bytes);
      wake_if_sleeping(p);
      r->done = bytes;
      r->complete = true;
      p.sends.pop();
      --npending_;
      moved += bytes + 1;
      continue;
    }
    bool by_cma = false;
    while (!p.send_started || r->done < bytes) {
      if (max_slots-- == 0) return moved;
      if (p.out_head - p.out_tail_seen >= p.out_nslots) {
        p.out_tail_seen = p.out->tail.load(std::memory_order_acquire);
        if (p.out_head - p.out_tail_seen >= p.out_nslots) return moved;
      }
      uint8_t* s = p.out_slots + (p.out_head % p.out_nslots) * p.out_stride;
      SlotHdr* h = reinterpret_cast<SlotHdr*>(s);
      if (!p.send_started && send_by_cma(p, bytes)) {
        if (r->copy_to != nullptr && bytes) std::memcpy(r->copy_to, r->src, bytes);
        moved += send_cma_desc(p, s, *r);
        by_cma = true;
        break;
      }
      size_t chunk = size_t(std::min<uint64_t>(chunk_for(p.out_slot_bytes, bytes), bytes - r->done));
      if (!p.send_started) {
        h->sig = r->sig;
        h->first = kFirstSlot;
        p.send_started = true;
      } else {
        h->first = kContinue;
      }
      h->len = uint32_t(chunk);
      const uint8_t* from = static_cast<const uint8_t*>(r->src) + r->done;
      if (chunk) copy_maybe_streamed(s + payload_off(chunk), from, chunk, chunk >= stream_bytes_);
      publish(p.out->head, ++p.out_head);
      // The sender's own copy, from the source the slot copy just read.
      if (r->copy_to != nullptr && chunk) std::memcpy(static_cast<uint8_t*>(r->copy_to) + r->done, from, chunk);
      r->done += chunk;
      moved += chunk + 1;
      wake_if_sleeping(p);
    }
    p.sends.pop();
    p.send_started = false;
    if (by_cma) {
      // Complete once the receiver has read it (complete_cma_sends).
      p.cma_wait.push(r);
      continue;
    }
    r->complete = true;
    --npending_;
  }
  return moved;
}

size_t ShmWire::recv_some(Peer& p, int max_slots) {
  size_t moved = 0;
  const size_t nslots = layout_.nslots, slot_bytes = layout_.slot_bytes;
  while (!p.recvs.empty()) {
    Request* r = p.recvs.front();
    const uint64_t bytes = r->sig.bytes;
    if (is_fast(r, p.recv_started)) {
      if (max_slots-- == 0) return moved;
      const FastBox& b = p.in->fb[p.fb_in % kFastBoxes];
      if (b.stamp.load(std::memory_order_acquire) != p.fb_in + 1) {
        // Messages leave a sender in order on one channel or the other. A
        // ring message published while our fast box is still empty (checked
        // again after seeing it) means the sender's next message is large
        // where ours is small: the two sides called different collectives.
        if (p.in->head.load(std::memory_order_acquire) != p.in_tail &&
            b.stamp.load(std::memory_order_acquire) != p.fb_in + 1)
          mismatch_from_ring(p, *r);
        return moved;
      }
      MsgSig got;
      std::memcpy(&got, &b.sig, sizeof got);
      if (!sig_matches(got, r->sig)) throw_mismatch(*r, got, "shm");
      // An older message still on the ring was sent by a call of the peer
      // that no call of ours received: the ranks disagreed on who sends
      // (e.g. on a broadcast's root). The ring's head line is rarely
      // written, so this load is a cache hit.
      if (ordered_seqs_ && p.in->head.load(std::memory_order_acquire) != p.in_tail) {
        const SlotHdr* h = reinterpret_cast<const SlotHdr*>(
            p.in_slots + (p.in_tail % layout_.nslots) * layout_.stride);
        MsgSig older;
        std::memcpy(&older, &h->sig, sizeof older);
        if (ordered_seqs_ && sent_earlier(older, got)) throw_mismatch(*r, older, "shm");
      }
      if (b.len != bytes)
        throw_protocol(p.rank, "shm fast box carries " + std::to_string(b.len) + " bytes, expected " +
                                   std::to_string(bytes));
      if (bytes) {
        if (r->kind == Request::Kind::kRecv) std::memcpy(r->dst, b.data, bytes);
        else reduce2(r->dst, r->acc, b.data, bytes / dtype_size(r->dtype), r->dtype, r->rop);
      }
      publish(p.in->fb_tail, ++p.fb_in);
      if (p.in->fb_blocked.load(std::memory_order_seq_cst)) wake_if_sleeping(p);
      r->done = bytes;
      r->complete = true;
      p.recvs.pop();
      --npending_;
      moved += bytes + 1;
      continue;
    }
    while (!p.recv_started || r->done < bytes) {
      if (max_slots-- == 0) return moved;
      if (p.recv_cma) {
        moved += cma_read_piece(p, *r);
        continue;
      }
      if (p.in_tail == p.in_head_seen) {
        p.in_head_seen = p.in->head.load(std::memory_order_acquire);
        if (p.in_tail == p.in_head_seen) {
          // The mirror case: a small message in the fast box while we wait
          // for a large one on the ring.
          if (!p.recv_started) {
            const FastBox& b = p.in->fb[p.fb_in % kFastBoxes];
            if (b.stamp.load(std::memory_order_acquire) == p.fb_in + 1 &&
                p.in->head.load(std::memory_order_acquire) == p.in_tail) {
              MsgSig got;
              std::memcpy(&got, &b.sig, sizeof got);
              throw_mismatch(*r, got, "shm");
            }
          }
          return moved;
        }
      }
      const uint8_t* s = p.in_slots + (p.in_tail % nslots) * layout_.stride;
      const SlotHdr* h = reinterpret_cast<const SlotHdr*>(s);
      const uint32_t len = h->len;
      if (!p.recv_started) {
        if (h->first != kFirstSlot && h->first != kFirstCma)
          throw_protocol(p.rank, "shm slot continues a message where a new one should start");
        MsgSig got;
        std::memcpy(&got, &h->sig, sizeof got);
        if (!sig_matches(got, r->sig)) throw_mismatch(*r, got, "shm");
        // The mirror of the fast-box check: an older small message waiting.
        const FastBox& b = p.in->fb[p.fb_in % kFastBoxes];
        if (b.stamp.load(std::memory_order_acquire) == p.fb_in + 1) {
          MsgSig older;
          std::memcpy(&older, &b.sig, sizeof older);
          if (ordered_seqs_ && sent_earlier(older, got)) throw_mismatch(*r, older, "shm");
        }
        p.recv_started = true;
        if (h->first == kFirstCma) {
          moved += start_cma_recv(p, s, len, bytes);
          continue;
        }
      } else if (h->first != kContinue) {
        throw_protocol(p.rank, "shm message ended early (new message header inside a payload)");
      }
      const uint64_t want = std::min<uint64_t>(chunk_for(slot_bytes, bytes), bytes - r->done);
      if (len != want)
        throw_protocol(p.rank, "shm slot carries " + std::to_string(len) + " bytes, expected " +
                                   std::to_string(want));
      if (len) {
        uint8_t* dst = static_cast<uint8_t*>(r->dst) + r->done;
        const uint8_t* src = s + payload_off(len);
        if (r->kind == Request::Kind::kRecv) {
          copy_maybe_streamed(dst, src, len, r->stream_dst);
        } else {
          const uint8_t* acc = static_cast<const uint8_t*>(r->acc) + r->done;
          reduce2(dst, acc, src, len / dtype_size(r->dtype), r->dtype, r->rop);
        }
      }
      publish(p.in->tail, ++p.in_tail);
      r->done += len;
      moved += len + 1;
      wake_if_sleeping(p);
    }
    if (p.recv_cma) ack_cma_recv(p);
    r->complete = true;
    p.recvs.pop();
    p.recv_started = false;
    --npending_;
  }
  return moved;
}

bool ShmWire::check_liveness() {
  last_check_ns_ = now_ns();
  // Abandoned by this process (another communicator of its family failed)
  // while an operation still waits here: stop it.
  if (npending_ > 0)
    if (std::string mine = abort_text(*my_); !mine.empty())
      throw Error(Errc::kPeerDied,
                  describe_self() + " stopped: this process abandoned the communicator after: " + mine);
  bool newly = false;
  for (Peer& p : peers_local_) {
    if (p.dead) continue;
    if (std::string why = abort_text(*p.seg); !why.empty()) {
      p.dead = true;
      newly = true;
      p.how = "abandoned the communicator: " + why;
      // The communicator has failed: what waits here on other peers can
      // no longer complete everywhere, so it stops now too.
      if (npending_ > 0) throw_peer_died(p.rank, nullptr, p.how);
      continue;
    }
    bool gone = false;
    if (p.pidfd >= 0) {
      pollfd pf{p.pidfd, POLLIN, 0};
      gone = ::poll(&pf, 1, 0) > 0;
    } else {
      gone = ::kill(p.pid, 0) != 0 && errno == ESRCH;
    }
    if (gone) {
      p.dead = true;
      p.how = "exited";
      newly = true;
      BRAID_LOG(kInfo, "shm: " << describe_peer(p.rank) << " exited");
    }
  }
  return newly;
}

int ShmWire::exited_peer() {
  check_liveness();
  for (const Peer& p : peers_local_)
    if (p.dead) return p.rank;
  return -1;
}

std::string ShmWire::how_gone(int peer) const {
  const int i = peer >= 0 && size_t(peer) < index_.size() ? index_[size_t(peer)] : -1;
  if (i < 0 || !peers_local_[size_t(i)].dead) return "exited";
  return peers_local_[size_t(i)].how;
}

std::string ShmWire::peer_abort_reason() const {
  // Only the peers' segments (atomics), not Peer::dead: any thread may ask.
  for (const Peer& p : peers_local_)
    if (std::string r = abort_text(*p.seg); !r.empty()) return r;
  return {};
}

void ShmWire::abort(const std::string& why) {
  // Once, though a failure here and a sibling's may call it together.
  if (abort_claimed_.exchange(true)) return;
  std::snprintf(my_->abort_msg, sizeof my_->abort_msg, "%s", why.c_str());
  my_->aborted.store(1, std::memory_order_release);
  // Wake every peer, asleep or about to be: they look at the flag when
  // they wake (check_liveness).
  for (Peer& p : peers_local_) {
    p.seg->bell.fetch_add(1, std::memory_order_seq_cst);
    futex_wake_all(&p.seg->bell);
  }
}

void ShmWire::fail_dead(Peer& p) {
  const Request* r = !p.recvs.empty() ? p.recvs.front() : !p.cma_wait.empty() ? p.cma_wait.front() : p.sends.front();
  throw_peer_died(p.rank, r, p.how);
}

bool ShmWire::progress() {
  if (npending_ == 0) return false;
  // Round robin, one slot per peer and direction per turn: the peers'
  // rings drain while ours fill, so neither side stalls on a full ring
  // while the other copies a whole ring's worth. A call returns after
  // ~4 MiB so the caller can post more work.
  size_t total = 0;
  for (;;) {
    size_t round = 0;
    for (Peer& p : peers_local_) {
      const bool sending = !p.sends.empty() || !p.cma_wait.empty();
      if (!sending && p.recvs.empty()) continue;
      size_t pm = 0;
      if (sending) pm += send_some(p, 1);
      if (!p.recvs.empty()) pm += recv_some(p, 1);
      round += pm;
      // A dead peer's last messages are still in the ring: fail only once
      // nothing more can move.
      if (p.dead && pm == 0 && (sending || !p.recvs.empty())) fail_dead(p);
    }
    total += round;
    if (round == 0 || npending_ == 0 || total >= (size_t(4) << 20)) break;
  }
  const bool moved = total > 0;
  // Callers that only spin on progress() still learn of dead peers: look at
  // the clock every 256 idle calls, at the peers every kLivenessEveryNs.
  if (!moved && npending_ > 0 && (++idle_calls_ & 255) == 0 && now_ns() - last_check_ns_ > kLivenessEveryNs) {
    if (check_liveness()) return true;  // let the caller call progress() again
  }
  return moved;
}

void ShmWire::wait_activity(std::chrono::microseconds timeout) {
  // Spin on the rings themselves: no doorbell traffic while both sides are
  // awake. With more ranks than cores, poll between sched_yield() calls
  // instead (shm_wait_plan). Then sleep on the doorbell for the rest of the
  // timeout.
  const uint64_t tmo = uint64_t(std::max<int64_t>(timeout.count(), 0)) * 1000;
  const uint64_t deadline = now_ns() + tmo;
  if (poll_per_plan(wait_, [&] { return ready(); }, tmo)) return;
  for (;;) {
    uint64_t now = now_ns();
    if (now >= deadline) return;
    uint64_t slice = std::min(deadline - now, kSleepSliceNs);
    const uint32_t seen = my_->bell.load(std::memory_order_seq_cst);
    my_->waiting.store(1, std::memory_order_seq_cst);
    // A peer's plain-store publish (ShmWire::publish) that read the flag
    // before we raised it is on its way out of that core's store buffer:
    // look for kPublishGraceNs, not once, before sleeping on it.
    if (spin_until([&] { return ready(); }, kPublishGraceNs)) {
      my_->waiting.store(0, std::memory_order_relaxed);
      return;
    }
    futex_wait(&my_->bell, seen, slice);
    my_->waiting.store(0, std::memory_order_relaxed);
    if (ready()) return;
    if (npending_ > 0 && check_liveness()) return;
  }
}

}  // namespace shm

std::unique_ptr<Wire> make_shm_wire(const WireContext& ctx, const std::vector<int>& peers) {
  return std::make_unique<shm::ShmWire>(ctx, peers);
}

}  // namespace braid::comm
