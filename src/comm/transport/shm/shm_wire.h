// ShmWire, the shared-memory wire: one class whose definitions are split by
// concern over shm_wire_setup.cc (segments), shm_wire_send.cc,
// shm_wire_recv.cc, shm_wire_liveness.cc (dead peers, abort),
// shm_wire_progress.cc (progress, waiting) and shm_wire_cma.cc (the opt-in
// single-copy path). Private to those files; shm_transport.h describes the
// protocol and shm_segment.h the segment layout.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "comm/transport/shm/shm_segment.h"
#include "comm/transport/wire.h"

namespace braid::comm::shm {

// BRAID_SHM_CMA_BYTES (shm_wire_cma.cc): sends of at least this many bytes go
// single-copy; 0 turns single copy off.
uint64_t env_cma_bytes();

class ShmWire final : public Wire {
 public:
  ShmWire(const WireContext& ctx, const std::vector<int>& peers);
  ~ShmWire() override;

  void post(Request* r) override;
  bool progress() override;
  bool peek(int peer, MsgSig* next) override;
  void wait_activity(std::chrono::microseconds timeout) override;
  int exited_peer() override;
  std::string how_gone(int peer) const override;
  void abort(const std::string& why) override;
  std::string peer_abort_reason() const override;
  std::string kind_to(int) const override { return "shm"; }
  bool busy() const override { return npending_ > 0; }
  bool poll_ready() override { return ready(); }
  bool fuses_copy() const override { return true; }

 private:
  struct Peer {
    int rank = -1;
    pid_t pid = 0;
    int pidfd = -1;
    bool dead = false;  // exited, or abandoned the communicator: then `how` says which
    std::string how;
    SegHeader* seg = nullptr;  // the peer's segment (its doorbell, my ring into it)
    size_t seg_len = 0;
    // Outbound ring (lives in the peer's segment, the peer's geometry).
    RingCtl* out = nullptr;
    uint8_t* out_slots = nullptr;
    size_t out_nslots = 0, out_slot_bytes = 0, out_stride = 0;
    uint64_t out_head = 0, out_tail_seen = 0;
    uint64_t fb_head = 0, fb_tail_seen = 0;  // fast boxes sent / known consumed
    bool send_started = false;
    // Inbound ring (in my segment, my geometry).
    RingCtl* in = nullptr;
    uint8_t* in_slots = nullptr;
    uint64_t in_tail = 0, in_head_seen = 0;
    uint64_t fb_in = 0;  // fast boxes received
    bool recv_started = false;
    ReqQueue sends, recvs;
    // Single-copy (CMA) state. Sending: the receiver's probe verdict once
    // known, descriptors published, and the sends published but not yet
    // acked (the last cma_wait.size() descriptors). Receiving: descriptors
    // read, and the front recv's source address while reading it.
    uint32_t cma_ok = kCmaUnknown;
    uint64_t cma_sent = 0;
    ReqQueue cma_wait;
    uint64_t cma_read = 0, recv_cma_addr = 0;
    bool recv_cma = false;
  };

  // Move at most `max_slots` slots; return the payload bytes + 1 per slot
  // moved (0: nothing moved).
  size_t send_some(Peer& p, int max_slots);
  size_t recv_some(Peer& p, int max_slots);
  // Single copy (shm_wire_cma.cc): a send of at least cma_bytes_ to a peer whose
  // probe succeeded goes as a descriptor; the receiver reads it with
  // process_vm_readv one piece per call and acks when done.
  bool send_by_cma(Peer& p, uint64_t bytes) {
    if (cma_bytes_ == 0 || bytes < cma_bytes_) return false;
    if (p.cma_ok == kCmaUnknown) p.cma_ok = p.out->cma_ok.load(std::memory_order_acquire);
    return p.cma_ok == kCmaOn;
  }
  // Descriptors go out back to back, so the receiver finds the next one as
  // soon as it finishes a message; any other send waits until every
  // published descriptor is acked, so sends still complete in order.
  bool may_send_front(Peer& p) {
    return p.cma_wait.empty() || (!p.send_started && send_by_cma(p, p.sends.front()->sig.bytes));
  }
  bool cma_acked(const Peer& p) const {
    return !p.cma_wait.empty() &&
           p.out->cma_ack.load(std::memory_order_acquire) > p.cma_sent - p.cma_wait.size();
  }
  size_t complete_cma_sends(Peer& p);
  // r, the front of `q`, has moved all its `bytes`: mark it complete and
  // take it off.
  void complete_front(ReqQueue& q, Request* r, uint64_t bytes) {
    r->done = bytes;
    r->complete = true;
    q.pop();
    --npending_;
  }
  // Publish a descriptor for `r` in slot `s`; returns 1 (one slot moved).
  size_t send_cma_desc(Peer& p, uint8_t* s, const Request& r);
  // Take the descriptor in slot `s` (payload `len` bytes) for a message of
  // `bytes`, free its slot and start reading; returns 1.
  size_t start_cma_recv(Peer& p, const uint8_t* s, uint32_t len, uint64_t bytes);
  size_t cma_read_piece(Peer& p, Request& r);
  void ack_cma_recv(Peer& p);
  uint32_t probe_cma(const Peer& p) const;
  // Stores a counter that a peer polls (a fast-box stamp, a ring's head or
  // tail, an ack); wake_if_sleeping() must follow. By default a plain store
  // (x86: `mov`), so the caller goes on to its next poll while the line
  // travels to the peer. The load in wake_if_sleeping() may then run before
  // the store is visible, and miss a peer that raised its waiting flag in
  // between; that peer's re-check after raising the flag outlasts the store's
  // way out of the store buffer (kPublishGraceNs, wait_activity), so it sees
  // the message itself. BRAID_SHM_LIGHT_PUBLISH=0: a seq_cst store (`xchg`),
  // which orders the pair outright but first waits until every line of the
  // message has been taken back from the peer's cache, a cost that small
  // messages feel most.
  void publish(std::atomic<uint64_t>& at, uint64_t v) const {
    if (light_publish_) {
      at.store(v, std::memory_order_release);
      std::atomic_signal_fence(std::memory_order_seq_cst);  // keep the flag load below
    } else {
      at.store(v, std::memory_order_seq_cst);
    }
  }
  // Called after publish(): a peer that went to sleep before seeing the
  // store has raised its waiting flag (see publish() for why one side sees
  // the other).
  void wake_if_sleeping(Peer& p) {
    if (p.seg->waiting.load(std::memory_order_seq_cst)) {
      p.seg->bell.fetch_add(1, std::memory_order_seq_cst);
      futex_wake_all(&p.seg->bell);
    }
  }
  // True if progress() would move something now (a slot to read for a
  // posted recv, a free slot for a posted send).
  bool ready() {
    for (Peer& p : peers_local_) {
      if (!p.recvs.empty()) {
        if (p.recv_cma) {
          return true;
        } else if (is_fast(p.recvs.front(), p.recv_started)) {
          if (p.in->fb[p.fb_in % kFastBoxes].stamp.load(std::memory_order_acquire) == p.fb_in + 1)
            return true;
        } else if (p.in->head.load(std::memory_order_acquire) != p.in_tail) {
          return true;
        }
      }
      if (cma_acked(p)) return true;
      if (!p.sends.empty() && may_send_front(p)) {
        if (is_fast(p.sends.front(), p.send_started)) {
          if (p.fb_head - p.out->fb_tail.load(std::memory_order_acquire) < kFastBoxes) return true;
        } else if (p.out_head - p.out->tail.load(std::memory_order_acquire) < p.out_nslots) {
          return true;
        }
      }
    }
    return false;
  }
  // True when `older` is a collective's message from a call before `now`'s:
  // on one communicator collectives run one at a time in sequence order, so
  // such a message, still unread, belongs to a call this rank has finished.
  static bool sent_earlier(const MsgSig& older, const MsgSig& now) {
    auto collective = [](const MsgSig& s) {
      return s.op != CollOp::kSend && s.op != CollOp::kRecv && s.op != CollOp::kProbe;
    };
    return collective(older) && collective(now) && older.seq < now.seq;
  }
  static bool is_fast(const Request* r, bool started) {
    return !started && r->sig.bytes <= kFastBytes;
  }
  [[noreturn]] void mismatch_from_ring(Peer& p, const Request& r) {
    const SlotHdr* h = reinterpret_cast<const SlotHdr*>(p.in_slots + (p.in_tail % layout_.nslots) * layout_.stride);
    MsgSig got;
    std::memcpy(&got, &h->sig, sizeof got);
    throw_mismatch(r, got, "shm");
  }
  bool check_liveness();  // true if a peer was newly found dead
  [[noreturn]] void fail_dead(Peer& p);
  // The owner's abort message once it has set its mark, else "".
  static std::string abort_text(const SegHeader& h) {
    std::optional<AbortNote> n = h.abort.read();
    return n ? n->msg : std::string();
  }

  Layout layout_;
  std::string name_;
  SegHeader* my_ = nullptr;
  std::vector<Peer> peers_local_;
  std::vector<int> index_;  // rank -> index in peers_local_, -1 if not shm
  size_t npending_ = 0;
  ShmWaitPlan wait_;
  bool light_publish_ = true;  // BRAID_SHM_LIGHT_PUBLISH (publish())
  bool ordered_seqs_ = false;  // TransportOptions::ordered_seqs (sent_earlier())
  uint64_t last_check_ns_ = 0;
  uint32_t idle_calls_ = 0;
  uint64_t cma_bytes_ = 0;            // BRAID_SHM_CMA_BYTES; 0: single copy off
  size_t stream_bytes_ = ~size_t(0);  // BRAID_SHM_STREAM_BYTES (slot copies)
  std::vector<uint8_t> cma_scratch_;  // kRecvReduce pieces, allocated on first use
};

}  // namespace braid::comm::shm
