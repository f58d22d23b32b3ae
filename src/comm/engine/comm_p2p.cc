// CommImpl's point-to-point path: send / recv issued, grouped with the
// send / recv queued right behind them, and progressed together.
#include <algorithm>
#include <deque>

#include "braid/env.h"
#include "comm/engine/comm_impl.h"

namespace braid::comm {

Work CommImpl::launch_p2p(bool sending, const void* src, void* dst, size_t count, DType t,
                          int peer, int tag, size_t bytes, bool async, CollOp op) {
  // The application's sends and receives go to the twin; the probe's stay
  // here (they run while this communicator is being built, before the twin).
  if (p2p_ && op == CollOp::kSend)
    return p2p_->launch_p2p(sending, src, dst, count, t, peer, tag, bytes, async, op);
  // A receive carries the sender's signature (kSend) so the two compare
  // equal. A send is numbered now; a receive when it is posted, in the
  // order receives are matched (one from any source learns its sender
  // only then, and the receives behind it wait).
  MsgSig sig = next_sig(op, count, t, ReduceOp::kSum, tag,
                        sending ? int64_t(next_p2p_seq(peer, true)) : 0);
  const algo::Algorithm& a = choose(CollOp::kSend, bytes, t);
  // A blocking call with nothing queued runs alone, right here (nothing
  // can join it: a communicator is used by one thread at a time).
  if (!async && inline_begin()) {
    if (!sending) sig.seq = next_p2p_seq(peer, false);
    algo::Call call;
    call.send = src;
    call.recv = dst;
    call.count = count;
    call.root = peer;
    call.sending = sending;
    run_inline(sig, a, call, fr_.record(sig));
    return Work(completed_work());
  }
  sig.bytes = bytes;
  WorkState::P2p p;
  p.kind = sending ? Request::Kind::kSend : Request::Kind::kRecv;
  p.peer = peer;
  p.src = src;
  p.dst = dst;
  return queue_p2p(std::move(p), sig, a, async);
}

Work CommImpl::queue_p2p(WorkState::P2p p, const MsgSig& sig, const algo::Algorithm& a,
                         bool async) {
  auto w = std::make_shared<WorkState>();
  w->timeout = timeout_;
  w->owner = this;
  p.sig = sig;
  p.fr_id = fr_.record(sig);
  p.algo = &a;
  w->p2p = std::make_unique<WorkState::P2p>(std::move(p));
  if (async) enqueue(w);
  else run_blocking(w);
  return Work(w);
}

Work CommImpl::launch_recv_any(void* dst, size_t count, DType t, int tag, size_t bytes,
                               bool async) {
  if (p2p_) return p2p_->launch_recv_any(dst, count, t, tag, bytes, async);
  MsgSig sig = next_sig(CollOp::kSend, count, t, ReduceOp::kSum, tag, 0);
  sig.bytes = bytes;
  WorkState::P2p p;
  p.kind = Request::Kind::kRecv;
  p.any = true;
  p.dst = dst;
  // Always through the queue's runner, which chooses the sender.
  return queue_p2p(std::move(p), sig, choose(CollOp::kSend, bytes, t), async);
}

std::string CommImpl::describe_p2p(const WorkState::P2p& p) const {
  const bool send = p.kind == Request::Kind::kSend;
  std::string s = p.sig.op == CollOp::kProbe ? "probe " : "";
  if (send) s += "send to rank " + std::to_string(p.peer) + " (";
  else if (!p.any) s += "recv from rank " + std::to_string(p.peer) + " (";
  else if (p.peer < 0) s += "recv from any rank (";
  else s += "recv from any rank (rank " + std::to_string(p.peer) + " chosen, ";
  if (p.sig.seq != 0) s += "seq " + std::to_string(p.sig.seq) + ", ";
  return s + "count " + std::to_string(p.sig.count) + " " + dtype_name(p.sig.dtype) + ", tag " +
         std::to_string(p.sig.root) + ")";
}

// For a receive from any source that found no sender: what each other
// rank's next message is, or why it was not looked at.
std::string CommImpl::any_source_view(const std::vector<int>& open_recvs, int tag) {
  std::string s;
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    if (!s.empty()) s += "; ";
    s += tp_->describe_peer(q) + ": ";
    MsgSig next;
    if (open_recvs[size_t(q)] > 0) s += "a receive posted before it still waits on it";
    else if (!tp_->peek(q, &next)) s += "no message arrived";
    else if (next.op == CollOp::kSend && next.root != tag)
      s += "its next message has tag " + std::to_string(next.root);
    else s += "its next message is " + describe_sig(next);
  }
  return s;
}

void CommImpl::run_p2p_group(std::vector<std::shared_ptr<WorkState>> ws) {
  auto take = [&] {  // takes the sends / recvs queued right behind
    std::lock_guard<std::mutex> g(qmu_);
    while (!queue_.empty() && queue_.front()->p2p) {
      ws.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
  };
  const uint64_t timeout_ns = uint64_t(timeout_.count()) * 1000000ull;
  // One entry per operation taken, in posting order, so the first open one
  // has the earliest deadline.
  std::deque<Request> reqs;  // stable addresses while the transport holds them
  std::vector<uint64_t> deadline;
  std::vector<char> open, posted;
  std::vector<int> open_recvs(size_t(size_), 0);  // posted, open receives per peer
  size_t unposted = 0;  // operations before this one are all posted or finished
  int next_look = 0;    // where a receive from any source starts looking (rotates)
  auto what = [&](size_t i) { return describe_p2p(*ws[i]->p2p); };
  auto finish = [&](size_t i, std::exception_ptr err) {
    open[i] = 0;
    const auto& p = *ws[i]->p2p;
    if (posted[i] && p.kind != Request::Kind::kSend) --open_recvs[size_t(p.peer)];
    fr_.finish(p.fr_id, err == nullptr);
    if (p.any && p.peer >= 0 && err == nullptr) ws[i]->source = p.peer;
    complete(*ws[i], err);
  };
  auto post = [&](size_t i) {
    auto& p = *ws[i]->p2p;
    fr_.start(p.fr_id, *p.algo);
    if (p.kind != Request::Kind::kSend) {
      p.sig.seq = next_p2p_seq(p.peer, false);
      fr_.set_seq(p.fr_id, p.sig.seq);
      ++open_recvs[size_t(p.peer)];
    }
    Request& r = reqs[i];
    r.kind = p.kind;
    r.peer = p.peer;
    r.sig = p.sig;
    r.src = p.src;
    r.dst = p.dst;
    r.dtype = p.sig.dtype;
    posted[i] = 1;
    tp_->post(&r);
  };
  // A receive from any source takes the first rank whose next message
  // carries its tag, among the ranks no earlier receive still waits on.
  auto choose_sender = [&](WorkState::P2p& p) {
    for (int k = 0; k < size_; ++k) {
      const int q = (next_look + k) % size_;
      MsgSig next;
      if (q == rank_ || open_recvs[size_t(q)] > 0 || !tp_->peek(q, &next)) continue;
      if (next.op != CollOp::kSend || next.root != p.sig.root) continue;
      p.peer = q;
      next_look = (q + 1) % size_;
      return true;
    }
    return false;
  };
  size_t timed_out = SIZE_MAX;  // set with the kTimeout thrown below (ws grows)
  try {
    unsigned spins = 0;
    for (;;) {
      for (size_t i = reqs.size(); i < ws.size(); ++i) {
        reqs.emplace_back();
        deadline.push_back(now_ns() + timeout_ns);
        open.push_back(1);
        posted.push_back(0);
      }
      // Post in order: sends at once; receives in the order they are
      // matched, so none passes a receive from any source still without a
      // sender (the message it is waiting for may be the one the later
      // receive would take).
      bool held = false;
      for (size_t i = unposted; i < ws.size(); ++i) {
        if (!open[i] || posted[i]) continue;
        if (broken_.load(std::memory_order_acquire)) {
          finish(i, std::make_exception_ptr(broken_error(what(i))));
          continue;
        }
        auto& p = *ws[i]->p2p;
        if (p.kind != Request::Kind::kSend && held) continue;
        if (p.any && p.peer < 0 && !choose_sender(p)) held = true;
        else post(i);
      }
      while (unposted < ws.size() && (!open[unposted] || posted[unposted])) ++unposted;
      // A failed communicator's transport still holds the requests of the
      // operation that failed (their owners are gone): once broken, it is
      // not progressed again, and these never reached it.
      if (broken_.load(std::memory_order_acquire) &&
          std::find(open.begin(), open.end(), char(1)) == open.end()) {
        const size_t taken = ws.size();
        take();
        if (taken == ws.size()) break;
        continue;
      }
      const bool moved = tp_->progress();
      size_t first = ws.size();  // the first operation still open
      for (size_t i = 0; i < ws.size(); ++i) {
        if (!open[i]) continue;
        if (posted[i] && reqs[i].complete) finish(i, nullptr);
        else if (first == ws.size()) first = i;
      }
      const size_t taken = ws.size();
      take();
      if (first == ws.size() && taken == ws.size()) break;
      if (moved || taken < ws.size() || ++spins < 64) continue;
      spins = 0;
      const uint64_t now = now_ns();
      if (now > deadline[first]) {
        const Request& r = reqs[first];
        const auto& p = *ws[first]->p2p;
        timed_out = first;
        const std::string after =
            " timed out after " + std::to_string(timeout_.count() / 1000.0).substr(0, 6) + " s";
        if (!posted[first])
          throw Error(Errc::kTimeout,
                      who() + ": " + what(first) + after +
                          (p.any && p.peer < 0
                               ? " with no message of tag " + std::to_string(p.sig.root) +
                                     " from any rank (" + any_source_view(open_recvs, p.sig.root) +
                                     ")"
                               : ", never posted: it waits behind a receive from any source"));
        throw Error(Errc::kTimeout, who() + ": " + what(first) + after + " with " +
                                        std::to_string(r.done) + "/" + std::to_string(r.sig.bytes) +
                                        " bytes moved, waiting on " + tp_->describe_peer(r.peer));
      }
      // Short naps: a send or recv queued meanwhile (the other half of an
      // exchange), or a message for a receive from any source, is picked up
      // within a millisecond.
      tp_->wait_activity(std::chrono::microseconds(
          std::min<uint64_t>((deadline[first] - now) / 1000, 1000)));
    }
  } catch (const Error& e0) {
    const Error e = forwarded(e0);
    // The timed-out operation's message already names it.
    open.resize(ws.size(), 1);
    posted.resize(ws.size(), 0);
    std::string first_msg;
    for (size_t i = 0; i < open.size(); ++i) {
      if (!open[i] || !posted[i]) continue;
      std::string msg =
          i == timed_out ? std::string(e.what()) : who() + ": " + what(i) + ": " + e.what();
      if (first_msg.empty()) first_msg = msg;
      finish(i, std::make_exception_ptr(Error(e.code(), msg)));
    }
    if (timed_out < open.size() && open[timed_out]) {  // one never posted
      first_msg = e.what();
      finish(timed_out, std::make_exception_ptr(Error(e.code(), first_msg)));
    }
    if (first_msg.empty()) first_msg = e.what();
    // Taken but never posted (a post threw, or they waited): never started.
    for (size_t i = 0; i < open.size(); ++i)
      if (open[i])
        finish(i, std::make_exception_ptr(
                      Error(e.code(), who() + ": " + what(i) + " not started: " + first_msg)));
    set_broken(e.code(), first_msg);
  }
}

uint64_t CommImpl::next_p2p_seq(int peer, bool sending) {
  auto& v = sending ? p2p_send_seq_ : p2p_recv_seq_;
  if (v.empty()) v.assign(size_t(size_), 0);
  return ++v[size_t(peer)];
}

}  // namespace braid::comm
