// What every wire shares: naming this rank and its peers, and the errors a
// wire raises (mismatch, dead peer, broken frame) worded alike on each.
#include "comm/transport/wire.h"

#include "braid/error.h"

namespace braid::comm {

int64_t WireContext::ms_left() const {
  uint64_t now = now_ns();
  return now >= deadline_ns ? 0 : int64_t((deadline_ns - now) / 1000000);
}

std::string Wire::describe_peer(int peer) const {
  if (peer < 0 || size_t(peer) >= peers_.size()) return "rank " + std::to_string(peer);
  return describe_peer_info(peers_[size_t(peer)]);
}

std::string Wire::describe_self() const {
  return rank_name(rank_, size_t(rank_) < peers_.size() ? peers_[size_t(rank_)].world_rank : -1);
}

void Wire::throw_mismatch(const Request& r, const MsgSig& got, const char* wire) const {
  // Message lengths are shown only when nothing else differs: they follow
  // from the algorithm, and beside a differing count they only confuse.
  MsgSig same_len = got;
  same_len.bytes = r.sig.bytes;
  const bool only_len = sig_matches(r.sig, same_len);
  throw Error(Errc::kMismatch, describe_self() + " expected " + describe_sig(r.sig, only_len) +
                                   " from rank " + std::to_string(r.peer) + ", but " + describe_peer(r.peer) +
                                   " sent " + describe_sig(got, only_len) + " (over " + wire + ")");
}

void Wire::throw_peer_died(int peer, const Request* pending, const std::string& how) const {
  std::string msg = "peer " + describe_peer(peer) + " " + how;
  if (pending) {
    msg += pending->kind == Request::Kind::kSend ? " while " + describe_self() + " was sending it "
                                                 : " while " + describe_self() + " was receiving ";
    msg += describe_sig(pending->sig) + " (" + std::to_string(pending->done) + " bytes moved)";
  }
  throw Error(Errc::kPeerDied, msg);
}

void Wire::throw_protocol(int peer, const std::string& what) const {
  throw Error(Errc::kProtocol, describe_self() + ": bad frame from " + describe_peer(peer) + ": " + what);
}

}  // namespace braid::comm
