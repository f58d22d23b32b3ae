// Shared-memory wire, receive path: a message comes in from a fast box or
// chunk by chunk from this rank's inbound slot ring, copied out or reduced
// straight out of the slot; the channel a message did not come on is
// checked for the other side's disagreement (mismatch, or a message left
// over from a call this rank never made).
#include <algorithm>
#include <cstring>

#include "braid/reduce.h"
#include "comm/transport/shm/shm_wire.h"
#include "comm/transport/shm/stream_copy.h"

namespace braid::comm::shm {

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
      complete_front(p.recvs, r, bytes);
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

// The next message is in the fast box or starts at the ring's tail; when
// both hold one, the earlier is the one the sender numbered first (a
// sender finishes each message before it starts the next, so either
// channel may hold the later one).
bool ShmWire::peek(int peer, MsgSig* next) {
  Peer& p = peers_local_[size_t(index_[size_t(peer)])];
  if (p.dead || !p.recvs.empty() || p.recv_started) return false;
  bool in_box = false, on_ring = false;
  MsgSig box, ring;
  const FastBox& b = p.in->fb[p.fb_in % kFastBoxes];
  if (b.stamp.load(std::memory_order_acquire) == p.fb_in + 1) {
    std::memcpy(&box, &b.sig, sizeof box);
    in_box = true;
  }
  if (p.in->head.load(std::memory_order_acquire) != p.in_tail) {
    const SlotHdr* h =
        reinterpret_cast<const SlotHdr*>(p.in_slots + (p.in_tail % layout_.nslots) * layout_.stride);
    if (h->first == kFirstSlot || h->first == kFirstCma) {
      std::memcpy(&ring, &h->sig, sizeof ring);
      on_ring = true;
    }
  }
  if (!in_box && !on_ring) return false;
  *next = in_box && (!on_ring || box.seq < ring.seq) ? box : ring;
  return true;
}

}  // namespace braid::comm::shm
