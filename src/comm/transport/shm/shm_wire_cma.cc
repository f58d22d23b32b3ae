// Shared-memory wire, single copy (CMA, opt-in): the ShmWire functions
// (shm_wire.h) that move a large message with process_vm_readv instead of
// through the slot ring.
//
// A send of at least BRAID_SHM_CMA_BYTES (default 0 = off; see
// env_cma_bytes for why) whose receiver can
// read the sender's memory goes as a descriptor instead of its payload: one
// ring slot holding the MsgSig, the source address and the pair's running
// descriptor count. The receiver checks the signature, frees the slot and
// copies the payload straight from the sender's buffer with
// process_vm_readv, 1 MiB per call into a kRecv's destination, or 256 KiB at
// a time into a scratch buffer that it reduces from while still in cache
// (kRecvReduce). It then bumps the ring's cma_ack and rings the sender's
// doorbell; only then is the send complete, and the pair's next message may
// follow. Whether a receiver can read a sender (yama ptrace_scope, seccomp
// and non-dumpable processes say no) is probed once per direction at
// set-up: the receiver reads a word the sender publishes in its segment and
// records the verdict in the ring, which the sender consults before its
// first large send. Until then, or where the probe failed, large messages
// take the slot ring, which receivers always accept. Descriptors to one peer
// go out back to back; a send of another kind waits until all are acked, so
// sends still complete in order. A failed read later (the sender exited:
// kPeerDied; anything else: kIo) names the peer and the message.
#include <sys/uio.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "braid/env.h"
#include "braid/error.h"
#include "braid/log.h"
#include "braid/reduce.h"
#include "comm/transport/shm/shm_wire.h"

namespace braid::comm::shm {
namespace {

// The payload of a kFirstCma slot: where the message lies in the sender's
// address space, and its 1-based index among the pair's CMA messages.
struct CmaDesc {
  uint64_t addr;
  uint64_t index;
};
static_assert(kInline >= sizeof(CmaDesc));

// Single-copy reads: at most this much per process_vm_readv into a kRecv's
// destination (so one progress() call returns after a few pieces), and a
// scratch buffer of kCmaScratch bytes (cache-sized) for kRecvReduce, which
// reads a piece and reduces it while it is still in cache.
constexpr size_t kCmaPiece = size_t(1) << 20;
constexpr size_t kCmaScratch = size_t(256) << 10;

}  // namespace

// Sends of at least this many bytes go single-copy where the receiver can
// read the sender's memory. 0 (or less) turns it off; smaller values are
// raised past the fast-box limit, since small messages always use the boxes.
// Off by default: process_vm_readv copies well below the speed of the
// ring's memcpy between cached lines, and a collective's sources were
// usually just written, so they sit in cache where the ring's copy finds
// them; the pass over memory that a single copy saves does not make up
// for it.
uint64_t env_cma_bytes() {
  int64_t v = env_int("BRAID_SHM_CMA_BYTES", 0);
  return v <= 0 ? 0 : std::max<uint64_t>(uint64_t(v), kFastBytes + 1);
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

// Where the message lies goes out instead of the message: one slot, then
// the send waits in cma_wait until the receiver acks it.
size_t ShmWire::send_cma_desc(Peer& p, uint8_t* s, const Request& r) {
  SlotHdr* h = reinterpret_cast<SlotHdr*>(s);
  const CmaDesc d{uint64_t(reinterpret_cast<uintptr_t>(r.src)), ++p.cma_sent};
  h->sig = r.sig;
  h->first = kFirstCma;
  h->len = uint32_t(sizeof d);
  std::memcpy(s + payload_off(sizeof d), &d, sizeof d);
  publish(p.out->head, ++p.out_head);
  wake_if_sleeping(p);
  return 1;
}

// The single-copy sends whose receiver has finished reading them.
size_t ShmWire::complete_cma_sends(Peer& p) {
  size_t n = 0;
  for (; cma_acked(p); ++n) {
    Request* r = p.cma_wait.front();
    complete_front(p.cma_wait, r, r->sig.bytes);
  }
  return n;
}

// A descriptor instead of the payload (its signature already matched): free
// its slot now and read the sender's buffer piece by piece (cma_read_piece).
size_t ShmWire::start_cma_recv(Peer& p, const uint8_t* s, uint32_t len, uint64_t bytes) {
  CmaDesc d;
  if (len != sizeof d) throw_protocol(p.rank, "shm single-copy descriptor of " + std::to_string(len) + " bytes");
  std::memcpy(&d, s + payload_off(len), sizeof d);
  if (d.index != p.cma_read + 1 || bytes <= kFastBytes)
    throw_protocol(p.rank, "shm single-copy descriptor " + std::to_string(d.index) + " out of sequence");
  p.recv_cma_addr = d.addr;
  p.recv_cma = true;
  publish(p.in->tail, ++p.in_tail);
  wake_if_sleeping(p);
  return 1;
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
    if (e == ESRCH) throw_peer_died(p.rank, &r, "exited (" + why + ")");
    if (p.dead) throw_peer_died(p.rank, &r, p.how + " (" + why + ")");
    throw Error(Errc::kIo, describe_self() + ": single-copy read of " + describe_sig(r.sig) +
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

// The whole message is read: the sender's send may complete.
void ShmWire::ack_cma_recv(Peer& p) {
  p.recv_cma = false;
  publish(p.in->cma_ack, ++p.cma_read);
  wake_if_sleeping(p);
}

}  // namespace braid::comm::shm
