// Shared-memory wire: see shm_transport.h for the layout and the protocol.
#include "comm/shm_transport.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>

#include "braid/env.h"
#include "braid/error.h"
#include "braid/log.h"
#include "braid/reduce.h"

namespace braid::comm {
namespace {

constexpr uint64_t kMagic = 0x314d534449415242ull;  // "BRAIDSM1"
constexpr size_t kLine = 64;
constexpr size_t kSlotHdr = 64;  // payload starts one cache line into a slot
constexpr uint64_t kLivenessEveryNs = 50'000'000;
constexpr uint64_t kSleepSliceNs = 50'000'000;

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
  alignas(kLine) char end_[1];
};

// head: slots published by the sender; tail: slots freed by the receiver.
// Each on its own line so the two sides do not false-share.
// Fast box: small messages (up to kFastBytes, zero included) skip the slot
// ring. A box is two cache lines; the receiver polls the stamp in the first,
// so a small message costs one line transfer instead of head + slot. The
// stamp (the message's 1-based index on this pair) is written last.
constexpr size_t kFastBoxes = 4;
struct FastBox {
  std::atomic<uint64_t> stamp;
  uint32_t len;
  uint32_t pad;
  MsgSig sig;
  uint8_t data[8 * kLine - 56];
};
constexpr size_t kFastBytes = sizeof(FastBox::data);
static_assert(sizeof(FastBox) == 8 * kLine);

struct RingCtl {
  alignas(kLine) std::atomic<uint64_t> head;
  alignas(kLine) std::atomic<uint64_t> tail;
  alignas(kLine) std::atomic<uint64_t> fb_tail;  // fast boxes consumed
  // Raised by a sender that found every fast box full: only then does the
  // receiver pay for a wake-up check after consuming one (checking the
  // sender's doorbell on every small message measured ~0.3 µs per call).
  alignas(kLine) std::atomic<uint32_t> fb_blocked;
  // Single-copy messages (see shm_transport.h), both written by the
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
// The payload of a kFirstCma slot: where the message lies in the sender's
// address space, and its 1-based index among the pair's CMA messages.
struct CmaDesc {
  uint64_t addr;
  uint64_t index;
};
// Payloads up to kInline bytes ride in the header's cache line, so a tiny
// message costs the receiver one line less to pull over.
constexpr size_t kInline = kSlotHdr - sizeof(SlotHdr);
static_assert(sizeof(SlotHdr) <= kSlotHdr && kInline >= sizeof(CmaDesc));
inline size_t payload_off(size_t len) { return len <= kInline ? sizeof(SlotHdr) : kSlotHdr; }

size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

// Single-copy reads: at most this much per process_vm_readv into a kRecv's
// destination (so one progress() call returns after a few pieces), and a
// scratch buffer of kCmaScratch bytes (cache-sized) for kRecvReduce, which
// reads a piece and reduces it while it is still in cache.
constexpr size_t kCmaPiece = size_t(1) << 20;
constexpr size_t kCmaScratch = size_t(256) << 10;

// Bytes per slot for a message of `bytes`: whole slots for large messages
// (fewer hand-offs, which is what oversubscribed ranks need), but at least
// four pieces of >= 128 KiB for mid-sized ones, so that the sender's copy in
// and the receiver's copy out overlap instead of taking turns. Both sides
// compute it from the message length in the signature.
uint64_t chunk_for(uint64_t slot_bytes, uint64_t bytes) {
  uint64_t piece = std::max<uint64_t>(uint64_t(128) << 10, round_up(size_t(bytes / 4), kLine));
  return std::min<uint64_t>(slot_bytes, piece);
}

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

long futex(std::atomic<uint32_t>* addr, int op, uint32_t val, const timespec* ts) {
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op, val, ts, nullptr, 0);
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

class ShmWire final : public Wire {
 public:
  ShmWire(const WireContext& ctx, const std::vector<int>& peers);
  ~ShmWire() override;

  void post(Request* r) override;
  bool progress() override;
  void wait_activity(std::chrono::microseconds timeout) override;
  std::string kind_to(int) const override { return "shm"; }
  bool busy() const override { return npending_ > 0; }
  bool poll_ready() override { return ready(); }

 private:
  struct Peer {
    int rank = -1;
    pid_t pid = 0;
    int pidfd = -1;
    bool dead = false;
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
  // Single-copy pieces: a send of at least cma_bytes_ to a peer whose probe
  // succeeded goes as a descriptor; the receiver reads it with
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
  size_t cma_read_piece(Peer& p, Request& r);
  uint32_t probe_cma(const Peer& p) const;
  // Called after a seq_cst store that publishes a slot (head) or frees one
  // (tail): a peer that went to sleep before seeing it has raised its
  // waiting flag, and the seq_cst pair (our store then load, its flag store
  // then re-check) guarantees one side sees the other.
  void wake_if_sleeping(Peer& p) {
    if (p.seg->waiting.load(std::memory_order_seq_cst)) {
      p.seg->bell.fetch_add(1, std::memory_order_seq_cst);
      futex(&p.seg->bell, FUTEX_WAKE, INT_MAX, nullptr);
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

  Layout layout_;
  std::string name_;
  SegHeader* my_ = nullptr;
  std::vector<Peer> peers_local_;
  std::vector<int> index_;  // rank -> index in peers_local_, -1 if not shm
  size_t npending_ = 0;
  uint64_t spin_ns_ = 0;
  uint64_t last_check_ns_ = 0;
  uint32_t idle_calls_ = 0;
  uint64_t cma_bytes_ = 0;            // BRAID_SHM_CMA_BYTES; 0: single copy off
  std::vector<uint8_t> cma_scratch_;  // kRecvReduce pieces, allocated on first use
};

size_t env_slot_bytes() {
  // 512 KiB measured best for oversubscribed rings (4-8 ranks on 2 cores: fewer
  // hand-offs per byte) and no worse than 64-256 KiB for 2 ranks.
  int64_t v = env_int("BRAID_SHM_SLOT_BYTES", 512 << 10);
  v = std::clamp<int64_t>(v, 4096, int64_t(64) << 20);
  return round_up(size_t(v), kLine);
}
// Default: 8 slots per ring, fewer when many peers would make a rank's
// segment pass 32 MiB (each rank holds one inbound ring per local peer).
size_t env_slots(size_t slot_bytes, size_t nrings) {
  size_t dflt = std::clamp<size_t>((size_t(32) << 20) / (std::max<size_t>(nrings, 1) * slot_bytes), 2, 8);
  return size_t(std::clamp<int64_t>(env_int("BRAID_SHM_SLOTS", int64_t(dflt)), 2, 4096));
}

// Sends of at least this many bytes go single-copy where the receiver can
// read the sender's memory. 0 (or less) turns it off; smaller values are
// raised past the fast-box limit, since small messages always use the boxes.
// Off by default: on the 2-core VM it was measured on, reading with
// process_vm_readv ran at ~16 GB/s against ~45 GB/s for the ring's cached
// memcpy, and 2-rank all_reduce and all_gather (whose sources were just
// written) fell to 0.3-0.6x of the ring path at 256 KiB - 4 MiB.
uint64_t env_cma_bytes() {
  int64_t v = env_int("BRAID_SHM_CMA_BYTES", 0);
  return v <= 0 ? 0 : std::max<uint64_t>(uint64_t(v), kFastBytes + 1);
}

ShmWire::ShmWire(const WireContext& ctx, const std::vector<int>& peers)
    : Wire(ctx), layout_(env_slot_bytes(), env_slots(env_slot_bytes(), peers.size()), peers.size()) {
  std::vector<int> group = peers;
  group.push_back(ctx.rank);
  std::sort(group.begin(), group.end());
  spin_ns_ = spin_ns_for(int(group.size()));
  index_.assign(size_t(ctx.size), -1);

  // Create, size (reserving the pages so a full /dev/shm fails here and not
  // with SIGBUS later), map and initialise my segment.
  name_ = "/braid." + ctx.token + "." + std::to_string(ctx.rank);
  int fd = ::shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) throw_errno("shm_open " + name_);
  auto fail = [&](const std::string& what) {
    int e = errno;
    ::close(fd);
    ::shm_unlink(name_.c_str());
    errno = e;
    throw_errno(what);
  };
  if (::ftruncate(fd, off_t(layout_.total)) != 0) fail("ftruncate " + name_);
  if (int e = ::posix_fallocate(fd, 0, off_t(layout_.total)); e != 0) {
    errno = e;
    fail("reserving " + std::to_string(layout_.total >> 10) + " KiB of shared memory for " + name_ +
         " (is /dev/shm full? lower BRAID_SHM_SLOT_BYTES or BRAID_SHM_SLOTS)");
  }
  void* base = ::mmap(nullptr, layout_.total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (base == MAP_FAILED) fail("mmap " + name_);
  ::close(fd);
  my_ = static_cast<SegHeader*>(base);
  my_->total_bytes = layout_.total;
  my_->slot_bytes = layout_.slot_bytes;
  my_->nslots = uint32_t(layout_.nslots);
  my_->nrings = uint32_t(layout_.nrings);
  my_->owner = ctx.rank;
  cma_bytes_ = env_cma_bytes();
  my_->cma_probe_word = ctx.peers[size_t(ctx.rank)].nonce | 1;
  my_->cma_probe_addr = uint64_t(reinterpret_cast<uintptr_t>(&my_->cma_probe_word));
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
    int qfd = ::shm_open(qname.c_str(), O_RDWR, 0);
    if (qfd < 0) throw_errno("shm_open " + qname + " (segment of " + describe_peer(q) + ")");
    struct stat st {};
    if (::fstat(qfd, &st) != 0) {
      ::close(qfd);
      throw_errno("fstat " + qname);
    }
    void* qb = ::mmap(nullptr, size_t(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, qfd, 0);
    ::close(qfd);
    if (qb == MAP_FAILED) throw_errno("mmap " + qname);
    p.seg = static_cast<SegHeader*>(qb);
    p.seg_len = size_t(st.st_size);
    const SegHeader& h = *p.seg;
    if (size_t(st.st_size) < sizeof(SegHeader) || h.slot_bytes > (size_t(64) << 20) || h.nslots > 4096)
      throw Error(Errc::kProtocol, "shared-memory segment " + qname + " of " + describe_peer(q) + " is malformed");
    Layout ql(h.slot_bytes, h.nslots, h.nrings);
    if (h.magic != kMagic || h.owner != q ||
        h.nrings != peers.size() || ql.total != h.total_bytes || ql.total != size_t(st.st_size) ||
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

// Can this rank read `p`'s memory? EPERM (yama ptrace_scope, a peer that is
// not dumpable), ENOSYS (seccomp, old kernels) and the like turn single copy
// off for this direction only; the sender reads the verdict from cma_ok and
// until then sends through the ring, which the receiver always accepts.
uint32_t ShmWire::probe_cma(const Peer& p) const {
  if (cma_bytes_ == 0) return kCmaOff;
  uint64_t word = 0;
  iovec local{&word, sizeof word};
  iovec remote{reinterpret_cast<void*>(uintptr_t(p.seg->cma_probe_addr)), sizeof word};
  ssize_t n = ::process_vm_readv(p.pid, &local, 1, &remote, 1, 0);
  if (n == ssize_t(sizeof word) && word == p.seg->cma_probe_word) {
    BRAID_LOG(kDebug, "shm: single-copy reads from " << describe_peer(p.rank) << " for messages of >= "
                                                     << cma_bytes_ << " bytes");
    return kCmaOn;
  }
  BRAID_LOG(kInfo, "shm: no single-copy reads from " << describe_peer(p.rank) << " (process_vm_readv: "
                                                     << (n < 0 ? std::strerror(errno) : "read a different word")
                                                     << "); its large messages go through the slot ring");
  return kCmaOff;
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
}

// The single-copy sends whose receiver has finished reading them.
size_t ShmWire::complete_cma_sends(Peer& p) {
  size_t n = 0;
  for (; cma_acked(p); ++n) {
    Request* r = p.cma_wait.front();
    r->done = r->sig.bytes;
    r->complete = true;
    p.cma_wait.pop();
    --npending_;
  }
  return n;
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
      b.stamp.store(++p.fb_head, std::memory_order_seq_cst);
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
        const CmaDesc d{uint64_t(reinterpret_cast<uintptr_t>(r->src)), ++p.cma_sent};
        h->sig = r->sig;
        h->first = kFirstCma;
        h->len = uint32_t(sizeof d);
        std::memcpy(s + payload_off(sizeof d), &d, sizeof d);
        p.out->head.store(++p.out_head, std::memory_order_seq_cst);
        moved += 1;
        wake_if_sleeping(p);
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
      if (chunk) std::memcpy(s + payload_off(chunk), static_cast<const uint8_t*>(r->src) + r->done, chunk);
      p.out->head.store(++p.out_head, std::memory_order_seq_cst);
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
      if (b.len != bytes)
        throw_protocol(p.rank, "shm fast box carries " + std::to_string(b.len) + " bytes, expected " +
                                   std::to_string(bytes));
      if (bytes) {
        if (r->kind == Request::Kind::kRecv) std::memcpy(r->dst, b.data, bytes);
        else reduce2(r->dst, r->acc, b.data, bytes / dtype_size(r->dtype), r->dtype, r->rop);
      }
      p.in->fb_tail.store(++p.fb_in, std::memory_order_seq_cst);
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
        p.recv_started = true;
        if (h->first == kFirstCma) {
          // A descriptor instead of the payload: free its slot now and read
          // the sender's buffer piece by piece (cma_read_piece).
          CmaDesc d;
          if (len != sizeof d) throw_protocol(p.rank, "shm single-copy descriptor of " + std::to_string(len) + " bytes");
          std::memcpy(&d, s + payload_off(len), sizeof d);
          if (d.index != p.cma_read + 1 || bytes <= kFastBytes)
            throw_protocol(p.rank, "shm single-copy descriptor " + std::to_string(d.index) + " out of sequence");
          p.recv_cma_addr = d.addr;
          p.recv_cma = true;
          p.in->tail.store(++p.in_tail, std::memory_order_seq_cst);
          moved += 1;
          wake_if_sleeping(p);
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
          std::memcpy(dst, src, len);
        } else {
          const uint8_t* acc = static_cast<const uint8_t*>(r->acc) + r->done;
          reduce2(dst, acc, src, len / dtype_size(r->dtype), r->dtype, r->rop);
        }
      }
      p.in->tail.store(++p.in_tail, std::memory_order_seq_cst);
      r->done += len;
      moved += len + 1;
      wake_if_sleeping(p);
    }
    if (p.recv_cma) {
      p.recv_cma = false;
      p.in->cma_ack.store(++p.cma_read, std::memory_order_seq_cst);
      wake_if_sleeping(p);
    }
    r->complete = true;
    p.recvs.pop();
    p.recv_started = false;
    --npending_;
  }
  return moved;
}

// One piece of a single-copy receive: straight into a kRecv's destination,
// or into the cache-sized scratch and reduced from there for a kRecvReduce.
// Returns the piece's bytes + 1, like one slot.
size_t ShmWire::cma_read_piece(Peer& p, Request& r) {
  const bool reduce = r.kind == Request::Kind::kRecvReduce;
  const size_t n = size_t(std::min<uint64_t>(reduce ? kCmaScratch : kCmaPiece, r.sig.bytes - r.done));
  if (reduce && cma_scratch_.empty()) cma_scratch_.resize(kCmaScratch);
  uint8_t* to = reduce ? cma_scratch_.data() : static_cast<uint8_t*>(r.dst) + r.done;
  for (size_t got = 0; got < n;) {
    iovec local{to + got, n - got};
    iovec remote{reinterpret_cast<void*>(uintptr_t(p.recv_cma_addr + r.done + got)), n - got};
    const ssize_t k = ::process_vm_readv(p.pid, &local, 1, &remote, 1, 0);
    if (k > 0) {
      got += size_t(k);
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    const int e = k < 0 ? errno : EIO;
    const std::string why = std::string("process_vm_readv: ") + std::strerror(e);
    // A sender that exits takes its memory along: report the death.
    check_liveness();
    if (e == ESRCH || p.dead) throw_peer_died(p.rank, &r, "exited (" + why + ")");
    throw Error(Errc::kIo, "rank " + std::to_string(rank_) + ": single-copy read of " + describe_sig(r.sig) +
                               " from " + describe_peer(p.rank) + " failed at byte " +
                               std::to_string(r.done + got) + " of " + std::to_string(r.sig.bytes) + " (" + why +
                               ")");
  }
  if (reduce) {
    const size_t off = r.done;
    reduce2(static_cast<uint8_t*>(r.dst) + off, static_cast<const uint8_t*>(r.acc) + off, to,
            n / dtype_size(r.dtype), r.dtype, r.rop);
  }
  r.done += n;
  return n + 1;
}

bool ShmWire::check_liveness() {
  last_check_ns_ = now_ns();
  bool newly = false;
  for (Peer& p : peers_local_) {
    if (p.dead) continue;
    bool gone = false;
    if (p.pidfd >= 0) {
      pollfd pf{p.pidfd, POLLIN, 0};
      gone = ::poll(&pf, 1, 0) > 0;
    } else {
      gone = ::kill(p.pid, 0) != 0 && errno == ESRCH;
    }
    if (gone) {
      p.dead = true;
      newly = true;
      BRAID_LOG(kInfo, "shm: " << describe_peer(p.rank) << " exited");
    }
  }
  return newly;
}

void ShmWire::fail_dead(Peer& p) {
  const Request* r = !p.recvs.empty() ? p.recvs.front() : !p.cma_wait.empty() ? p.cma_wait.front() : p.sends.front();
  throw_peer_died(p.rank, r, "exited");
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
  // awake. The clock (~40 ns under a hypervisor) is read only every 64
  // polls, and not at all when the answer comes quickly.
  for (int i = 0; i < 64; ++i) {
    if (ready()) return;
    cpu_relax();
  }
  const uint64_t t0 = now_ns();
  const uint64_t tmo = uint64_t(std::max<int64_t>(timeout.count(), 0)) * 1000;
  const uint64_t deadline = t0 + tmo;
  const uint64_t spin_end = t0 + std::min(spin_ns_, tmo);
  while (now_ns() < spin_end) {
    for (int i = 0; i < 64; ++i) {
      if (ready()) return;
      cpu_relax();
    }
  }
  for (;;) {
    uint64_t now = now_ns();
    if (now >= deadline) return;
    uint64_t slice = std::min(deadline - now, kSleepSliceNs);
    const uint32_t seen = my_->bell.load(std::memory_order_seq_cst);
    my_->waiting.store(1, std::memory_order_seq_cst);
    if (ready()) {
      my_->waiting.store(0, std::memory_order_relaxed);
      return;
    }
    timespec ts{time_t(slice / 1'000'000'000), long(slice % 1'000'000'000)};
    futex(&my_->bell, FUTEX_WAIT, seen, &ts);
    my_->waiting.store(0, std::memory_order_relaxed);
    if (ready()) return;
    if (npending_ > 0 && check_liveness()) return;
  }
}

}  // namespace

std::unique_ptr<Wire> make_shm_wire(const WireContext& ctx, const std::vector<int>& peers) {
  return std::make_unique<ShmWire>(ctx, peers);
}

}  // namespace braid::comm
