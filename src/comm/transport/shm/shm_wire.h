// Shared-memory wire, private to shm_transport.cc (set-up, slot rings, fast
// boxes, progress and waiting) and shm_cma.cc (the opt-in single-copy path):
// the layout of a rank's segment and the ShmWire class. shm_transport.h
// describes the protocol.
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

#include "comm/transport/wire.h"

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
  // Set once by the owner when its communicator fails (ShmWire::abort),
  // after abort_msg; peers then fail what they have pending with it.
  alignas(kLine) std::atomic<uint32_t> aborted;
  char abort_msg[448];
  alignas(kLine) char end_[1];
};

// Fast box: small messages (up to kFastBytes, zero included) skip the slot
// ring. A box is 4 KiB (64 cache lines); the receiver polls the stamp in the
// first line, then pulls the payload's lines in parallel, so a small message
// costs one dependent line transfer instead of two (ring head, then slot).
// The stamp (the message's 1-based index on this pair) is written last.
// 4 KiB rather than 512 B: messages of 512 B to 4 KiB took the ring's two
// transfers, ~2x the latency (2 ranks, 1 KiB all_reduce 1.2 -> 0.7 us, 4 KiB
// all_gather and all_to_all 1.5 -> 1.0 us); the boxes add 128 KiB per
// directed pair, against at least 1 MiB of slots.
// 32 boxes: the sender reads the receiver's consumed count (a cache line
// the receiver writes, so a cross-core transfer) once per kFastBoxes
// messages; with 4 boxes that read cost ~60 ns per 8-byte all_reduce
// (0.56 µs → 0.48 µs with 32, 2 ranks).
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
  // receiver pay for a wake-up check after consuming one (checking the
  // sender's doorbell on every small message measured ~0.3 µs per call).
  alignas(kLine) std::atomic<uint32_t> fb_blocked;
  // Single-copy messages (see shm_cma.cc), both written by the
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

// BRAID_SHM_CMA_BYTES (shm_cma.cc): sends of at least this many bytes go
// single-copy; 0 turns single copy off.
uint64_t env_cma_bytes();

class ShmWire final : public Wire {
 public:
  ShmWire(const WireContext& ctx, const std::vector<int>& peers);
  ~ShmWire() override;

  void post(Request* r) override;
  bool progress() override;
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
  // Single copy (shm_cma.cc): a send of at least cma_bytes_ to a peer whose
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
  // message has been taken back from the peer's cache: ~40 ns per 8-byte
  // all_reduce and ~350 ns per 4 KiB one here (bench/results/).
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
  // The owner's abort message once it has set `aborted`, else "".
  static std::string abort_text(const SegHeader& h) {
    if (!h.aborted.load(std::memory_order_acquire)) return {};
    return std::string(h.abort_msg, strnlen(h.abort_msg, sizeof h.abort_msg));
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
  std::atomic<bool> abort_claimed_{false};  // abort() ran
  uint64_t last_check_ns_ = 0;
  uint32_t idle_calls_ = 0;
  uint64_t cma_bytes_ = 0;            // BRAID_SHM_CMA_BYTES; 0: single copy off
  size_t stream_bytes_ = ~size_t(0);  // BRAID_SHM_STREAM_BYTES (slot copies)
  std::vector<uint8_t> cma_scratch_;  // kRecvReduce pieces, allocated on first use
};

}  // namespace braid::comm::shm
