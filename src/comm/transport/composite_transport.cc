// CompositeTransport: routing, post-time checks, and waiting on several
// wires.
#include "comm/transport/composite_transport.h"

#include <algorithm>
#include <cstring>

#include "braid/error.h"
#include "braid/reduce.h"

namespace braid::comm {

void CompositeTransport::post(Request* r) {
  BRAID_CHECK_ARG(r != nullptr, "post: null request");
  BRAID_CHECK_ARG(r->peer >= 0 && size_t(r->peer) < route_.size(),
                  "post: peer " + std::to_string(r->peer) + " out of range [0, " +
                      std::to_string(route_.size()) + ")");
  const size_t n = r->sig.bytes;
  switch (r->kind) {
    case Request::Kind::kSend:
      BRAID_CHECK_ARG(n == 0 || r->src, "post: send with a null source");
      if (r->copy_to != nullptr && !route_[size_t(r->peer)]->fuses_copy()) {
        if (n) std::memmove(r->copy_to, r->src, n);
        r->copy_to = nullptr;
      }
      break;
    case Request::Kind::kRecv:
      BRAID_CHECK_ARG(n == 0 || r->dst, "post: recv with a null destination");
      break;
    case Request::Kind::kRecvReduce:
      BRAID_CHECK_ARG(n == 0 || (r->dst && r->acc), "post: recv-reduce with a null buffer");
      BRAID_CHECK_ARG(uint8_t(r->dtype) < kNumDTypes && n % dtype_size(r->dtype) == 0,
                      "post: recv-reduce of " + std::to_string(n) + " bytes is not whole elements");
      BRAID_CHECK_ARG(reduce_op_supported(r->rop, r->dtype),
                      std::string("post: ") + reduce_op_name(r->rop) + " is not defined on " +
                          dtype_name(r->dtype));
      break;
  }
  r->done = 0;
  r->complete = false;
  route_[size_t(r->peer)]->post(r);
}

bool CompositeTransport::progress() {
  bool moved = false;
  for (Wire* w : wires_) moved |= w->progress();
  return moved;
}

bool CompositeTransport::peek(int peer, MsgSig* next) {
  if (peer < 0 || size_t(peer) >= route_.size() || !route_[size_t(peer)]) return false;
  return route_[size_t(peer)]->peek(peer, next);
}

void CompositeTransport::wait_activity(std::chrono::microseconds timeout) {
  Wire* active[3];
  int n = 0;
  for (Wire* w : waitable_)
    if (w->busy()) active[n++] = w;
  if (n == 0) {
    // Nothing pending on a wire that can wake us: let the caller decide.
    if (self_ && self_->busy()) return;
    if (!waitable_.empty()) waitable_[0]->wait_activity(timeout);
    return;
  }
  if (n == 1) return active[0]->wait_activity(timeout);
  // Several wires (shm and tcp): a short wait on each in turn, then back
  // to the caller, which calls progress() again. Each wire's wait ends
  // early on its own activity; one that ends because of activity consumes
  // it (epoll), so this must not loop here. shm (whose poll_ready only
  // looks at its rings) comes first, so its activity is seen at once.
  for (int i = 0; i < n; ++i)
    if (active[i]->poll_ready()) return;
  auto slice = std::min(timeout, std::chrono::microseconds(50));
  for (int i = 0; i < n; ++i) {
    active[i]->wait_activity(slice);
    if (i + 1 < n && active[i]->poll_ready()) return;
  }
}

int CompositeTransport::exited_peer() {
  for (Wire* w : wires_)
    if (int p = w->exited_peer(); p >= 0) return p;
  return -1;
}

std::string CompositeTransport::how_gone(int peer) const {
  if (peer < 0 || size_t(peer) >= route_.size() || !route_[size_t(peer)]) return "exited";
  return route_[size_t(peer)]->how_gone(peer);
}

void CompositeTransport::abort(const std::string& why) {
  for (Wire* w : wires_) w->abort(why);
}

std::string CompositeTransport::peer_abort_reason() const {
  for (Wire* w : wires_)
    if (std::string r = w->peer_abort_reason(); !r.empty()) return r;
  return {};
}

std::string CompositeTransport::kind_to(int peer) const {
  if (peer < 0 || size_t(peer) >= route_.size()) return "none";
  return route_[size_t(peer)]->kind_to(peer);
}

std::string CompositeTransport::describe_peer(int peer) const {
  if (peer < 0 || size_t(peer) >= peers_.size()) return "rank " + std::to_string(peer);
  return describe_peer_info(peers_[size_t(peer)]);
}

std::string CompositeTransport::describe_self() const {
  return rank_name(rank_, peers_[size_t(rank_)].world_rank);
}

void CompositeTransport::add(std::unique_ptr<Wire> w, const std::vector<int>& peers, bool waitable) {
  if (route_.empty()) route_.assign(peers_.size(), nullptr);
  for (int p : peers) route_[size_t(p)] = w.get();
  wires_.push_back(w.get());
  if (waitable) waitable_.push_back(w.get());
  else self_ = w.get();
  owned_.push_back(std::move(w));
}

}  // namespace braid::comm
