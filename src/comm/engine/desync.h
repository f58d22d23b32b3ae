// Desync: what the ranks of one communicator tell each other through the
// store when their wires cannot.
//
// 1. Calls that disagree on who sends. When the ranks disagree on a rooted
//    collective's root (or on anything else that changes which rank sends
//    to which), every rank may only send, or only receive: no rank sees a
//    header it could compare with its own, and each waits for the other.
//    So a rank whose call has waited for kStallNs publishes the call it is
//    in and the last calls it completed under "desync/<rank>", and compares
//    them with what the peers it waits on published (every kStallEveryNs
//    after that). Both sides of such a disagreement wait, so both publish
//    and each finds the other's call; a peer that only waits for a slow
//    rank publishes calls equal to ours and changes nothing. Nothing is
//    sent on the fast path: a call that never waits that long pays nothing.
// 2. The first failure. set_broken records its code and message under
//    "failed" (the first rank to record it wins), before the transport
//    tells the peers. A peer that then sees this rank abandon the
//    communicator (a kPeerDied from its wire) reads the record, and fails
//    with the first failure's code — kMismatch, kTimeout — instead of
//    kPeerDied, which stays for processes that really died. A rank whose
//    call waits on other peers finds the record at its next stall check.
//
// Store errors never mask the failure being handled: each call here that
// reads or writes the store swallows them and reports "nothing known".
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "braid/error.h"
#include "braid/store.h"
#include "comm/algo/context.h"
#include "comm/transport/transport.h"

namespace braid::comm {

class Desync final : public StallWatch {
 public:
  // `store`: the communicator's own (prefixed) view of the job's store.
  Desync(std::shared_ptr<Store> store, int rank);

  // A collective completed on this rank. Called by the thread executing
  // the communicator's operations (one at a time), as stalled() is.
  void done(const MsgSig& call) {
    recent_[next_++ % recent_.size()] = call;
  }
  // StallWatch: throws the communicator's first failure if a rank recorded
  // one (a rank that waits on others, not on the one that failed, learns of
  // it here whatever the transport). Else publishes `call` and the recent
  // calls, reads what the peers in `waiting_on` published, and returns the
  // first peer whose call of a sequence number this rank has also made
  // differs from it.
  std::optional<Disagreement> stalled(const MsgSig& call,
                                      const std::vector<int>& waiting_on) override;

  // The communicator's first failure, if no rank has recorded one yet.
  // `origin`: the failing rank as peers name it ("rank 2 (pid … on host …)").
  void record_failure(Errc code, const std::string& origin, const std::string& msg);
  struct Failure {
    Errc code;
    std::string origin, msg;
  };
  // The first failure any rank recorded, if one did.
  std::optional<Failure> first_failure();
  // The error a rank raises when it learns of `f`: f's code; its message
  // names the rank that failed first, then gives that rank's message.
  static Error forward(const Failure& f);

 private:
  std::shared_ptr<Store> store_;
  int rank_;
  std::array<MsgSig, 4> recent_{};
  uint64_t next_ = 0;
  uint64_t published_seq_ = 0;
};

// True for the fields every rank passes alike (op, count, dtype, reduce
// op, root; not the message's length or step).
bool same_call(const MsgSig& a, const MsgSig& b);

}  // namespace braid::comm
