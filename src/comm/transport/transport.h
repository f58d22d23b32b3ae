// Transport: moves bytes between the ranks of one communicator.
//
// Internal interface between the algorithms (src/comm/algo) and the wires
// (transport/shm, transport/tcp and the self wire, routed per peer by the
// composite transport). An algorithm posts
// Requests and drives them to completion through progress()/wait_activity();
// a transport never blocks inside post() or progress().
//
// Ordering: requests to the same peer in the same direction complete in the
// order posted (like one MPI tag/communicator pair). Every message on the
// wire starts with its MsgSig (msg_sig.h); the receiver compares it with the
// MsgSig of the request it has posted and raises Error(kMismatch) showing both.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "braid/dtype.h"
#include "braid/env.h"
#include "braid/store.h"
#include "comm/transport/msg_sig.h"

namespace braid::comm {

struct Request {
  enum class Kind : uint8_t { kSend, kRecv, kRecvReduce };
  Kind kind = Kind::kSend;
  int peer = -1;
  MsgSig sig;           // sig.bytes is the payload length
  const void* src = nullptr;  // kSend: payload
  // kSend: also copy the payload here (the sender's own output, e.g. its
  // block of an all_gather). Wires that say fuses_copy() copy each piece
  // right after sending it, while the source is still in cache; for the
  // others the composite transport copies it all when the send is posted.
  void* copy_to = nullptr;
  void* dst = nullptr;        // kRecv: destination. kRecvReduce: dst = acc op incoming
  const void* acc = nullptr;  // kRecvReduce: left operand (may equal dst)
  // kRecv: write dst with streaming stores, past the cache (stream_copy.h):
  // set for large outputs that the call does not read again, so they do not
  // evict data that is read again.
  bool stream_dst = false;
  DType dtype = DType::kU8;   // kRecvReduce: element type; bytes % dtype_size == 0
  ReduceOp rop = ReduceOp::kSum;
  // Filled by the transport:
  size_t done = 0;        // payload bytes moved so far
  bool complete = false;  // set once all bytes moved (and, for sends, the
                          // source buffer may be reused)
};

// Slots per ring of a communicator's point-to-point transport (CommImpl's
// Role::kPointToPoint twin): a send waits for its receive anyway.
constexpr size_t kPointToPointShmSlots = 4;

struct TransportOptions {
  std::string mode = "auto";  // "auto": shm for same-host peers, tcp otherwise; "tcp"; "shm"
  std::string secret;         // job secret for TCP handshakes
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};  // for set-up
  int world_rank = -1;  // this rank in the top communicator, for messages (-1: the same)
  // At most this many slots per shared-memory ring (0: BRAID_SHM_SLOTS or
  // the default); point-to-point's own transport takes kPointToPointShmSlots.
  size_t max_shm_slots = 0;
  // The caller's collective messages to a peer carry sequence numbers that
  // never decrease (a communicator's do: one collective at a time, in
  // order). Then a collective message still unread when a later one
  // arrives on another channel was sent by a call the receiver never made
  // as a receiver, and the shm wire reports it (kMismatch).
  bool ordered_seqs = false;
};

// "rank R", or "rank R (world rank W)" when W is known and differs.
std::string rank_name(int rank, int world_rank);

class Transport {
 public:
  virtual ~Transport() = default;
  // Queues `r` (owned by the caller, kept alive until r->complete).
  virtual void post(Request* r) = 0;
  // Advances posted requests without blocking. True if anything moved.
  // Throws Error(kPeerDied | kMismatch | kProtocol) naming the peer.
  virtual bool progress() = 0;
  // The header of the next message from `peer` that has arrived (in whole
  // or in part) and that no posted receive has begun to take; false when
  // none has arrived yet, or the wire cannot tell. Takes nothing: the
  // message stays for the receive posted for it. Only while no receive
  // from `peer` is posted and incomplete (a receive from any source looks
  // at each peer's next message this way before choosing its sender).
  virtual bool peek(int peer, MsgSig* next) {
    (void)peer;
    (void)next;
    return false;
  }
  // Blocks until progress() may find work, or `timeout` passes. Cheap to
  // call in a loop: spins briefly, then yields the core (futex / epoll).
  virtual void wait_activity(std::chrono::microseconds timeout) = 0;
  // "shm", "tcp" or "self".
  virtual std::string kind_to(int peer) const = 0;
  // "rank 3 (pid 1234 on host h)".
  virtual std::string describe_peer(int peer) const = 0;
  // This rank: "rank R", or "rank R (world rank W)" in a sub-communicator.
  virtual std::string describe_self() const = 0;
  // Looks now for a peer whose process has exited, as far as this transport
  // can tell without traffic (the shm wire watches pidfds); its rank, or -1.
  // For waits outside the transport (the chain all-reduce's counters).
  // A peer that abandoned the communicator (abort) counts as gone too.
  virtual int exited_peer() { return -1; }
  // How exited_peer()'s peer went: "exited", or "abandoned the
  // communicator: <its error>".
  virtual std::string how_gone(int /*peer*/) const { return "exited"; }
  // This rank's communicator failed with `why`: tell every peer, so that
  // what they have pending with this rank, and what they post later, fails
  // at once with `why` (or, over TCP, as a closed connection) instead of
  // waiting for the deadline. Nothing is sent or received afterwards. Once;
  // later calls do nothing. May run on another thread than the one
  // progressing the transport (a sibling communicator failed).
  virtual void abort(const std::string& why) = 0;
  // The reason a peer that abandoned the communicator gave (the first such
  // peer seen), or "" — so that a rank passing an abort on forwards the
  // first failure instead of wrapping it again. Safe from any thread.
  virtual std::string peer_abort_reason() const { return {}; }
  // The cores the ranks on `peer`'s host may use between them (host_cores).
  virtual int cores_of(int peer) const { (void)peer; return usable_cores(); }
  // An algorithm copied `bytes` in its own memory (Context::copy): real
  // transports have nothing to do; the planner's simulator times it.
  virtual void copied(size_t bytes) { (void)bytes; }
};

// Builds the transport for `rank` of `size`, meeting the peers through
// `store` (keys are private to this communicator: callers pass a prefix
// store). Collective: every rank calls it. Throws Error with the peer that
// failed to appear within opt.timeout.
std::unique_ptr<Transport> make_transport(int rank, int size, Store& store,
                                          const TransportOptions& opt);

}  // namespace braid::comm
