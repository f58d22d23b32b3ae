// Wire: a Transport for a subset of a communicator's peers (self, shm or
// tcp), which the composite transport (composite_transport.h) routes each
// peer's requests to, and WireContext, what a wire's set-up is given.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "braid/store.h"
#include "comm/transport/peer_info.h"
#include "comm/transport/req_queue.h"
#include "comm/transport/transport.h"
#include "comm/transport/wait_plan.h"

namespace braid::comm {

// What a wire's set-up needs.
struct WireContext {
  int rank = 0;
  int size = 0;
  Store* store = nullptr;
  const TransportOptions* opt = nullptr;
  std::vector<PeerInfo> peers;  // indexed by rank
  std::string token;            // unique per communicator (hex)
  int host_cores = 1;           // host_cores() of this rank's host
  uint64_t deadline_ns = 0;     // set-up deadline (now_ns clock)

  int64_t ms_left() const;
};

// A Transport for a subset of the peers, plus what the composite needs to
// wait on several wires at once.
class Wire : public Transport {
 public:
  // True while any posted request is not complete.
  virtual bool busy() const = 0;
  // Non-blocking: true if something may have changed since the last
  // progress() (used when the composite waits on several wires).
  virtual bool poll_ready() = 0;
  // True if the wire performs a send's copy_to itself (see Request).
  virtual bool fuses_copy() const { return false; }
  std::string kind_to(int) const override = 0;
  std::string describe_peer(int peer) const override;

 protected:
  explicit Wire(const WireContext& ctx) : rank_(ctx.rank), peers_(ctx.peers) {}
  // "rank R", or "rank R (world rank W)" in a sub-communicator.
  std::string describe_self() const override;
  // Error(kMismatch) with both sides' descriptions.
  [[noreturn]] void throw_mismatch(const Request& r, const MsgSig& got, const char* wire) const;
  // Error(kPeerDied) naming the peer and what was pending.
  [[noreturn]] void throw_peer_died(int peer, const Request* pending, const std::string& how) const;
  // Error(kProtocol): a frame that breaks the wire format.
  [[noreturn]] void throw_protocol(int peer, const std::string& what) const;

  int rank_;
  std::vector<PeerInfo> peers_;
};

}  // namespace braid::comm
