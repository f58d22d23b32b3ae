// Shared-memory wire, send path: a message goes out through a fast box
// (small) or chunk by chunk through the peer's slot ring (large; or as a
// single-copy descriptor, shm_wire_cma.cc).
#include <algorithm>
#include <cstring>

#include "comm/transport/shm/shm_wire.h"
#include "comm/transport/shm/stream_copy.h"

namespace braid::comm::shm {

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
      complete_front(p.sends, r, bytes);
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

}  // namespace braid::comm::shm
