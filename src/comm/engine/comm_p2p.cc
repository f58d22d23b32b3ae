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
  // A receive carries the sender's signature (kSend) so the two compare equal.
  MsgSig sig = next_sig(op, count, t, ReduceOp::kSum, tag,
                        int64_t(next_p2p_seq(peer, sending)));
  const algo::Algorithm& a = choose(CollOp::kSend, bytes, t);
  // A blocking call with nothing queued runs alone, right here (nothing
  // can join it: a communicator is used by one thread at a time).
  if (!async && inline_begin()) {
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
  auto w = std::make_shared<WorkState>();
  w->timeout = timeout_;
  w->owner = this;
  w->p2p = std::make_unique<WorkState::P2p>();
  auto& p = *w->p2p;
  p.kind = sending ? Request::Kind::kSend : Request::Kind::kRecv;
  p.peer = peer;
  p.src = src;
  p.dst = dst;
  p.sig = sig;
  p.fr_id = fr_.record(sig);
  p.algo = &a;
  if (async) enqueue(w);
  else run_blocking(w);
  return Work(w);
}

std::string CommImpl::describe_p2p(const WorkState::P2p& p) const {
  const bool send = p.kind == Request::Kind::kSend;
  return std::string(p.sig.op == CollOp::kProbe ? "probe " : "") +
         (send ? "send to " : "recv from ") + "rank " + std::to_string(p.peer) + " (seq " +
         std::to_string(p.sig.seq) + ", count " + std::to_string(p.sig.count) + " " +
         dtype_name(p.sig.dtype) + ", tag " + std::to_string(p.sig.root) + ")";
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
  std::vector<char> open;
  auto what = [&](size_t i) { return describe_p2p(*ws[i]->p2p); };
  auto finish = [&](size_t i, std::exception_ptr err) {
    open[i] = 0;
    fr_.finish(ws[i]->p2p->fr_id, err == nullptr);
    complete(*ws[i], err);
  };
  size_t timed_out = SIZE_MAX;  // set with the kTimeout thrown below (ws grows)
  try {
    unsigned spins = 0;
    for (;;) {
      for (size_t i = reqs.size(); i < ws.size(); ++i) {  // post the newly taken
        const auto& p = *ws[i]->p2p;
        Request& r = reqs.emplace_back();
        deadline.push_back(now_ns() + timeout_ns);
        open.push_back(1);
        if (broken_.load(std::memory_order_acquire)) {
          finish(i, std::make_exception_ptr(broken_error(what(i))));
          continue;
        }
        fr_.start(p.fr_id, *p.algo);
        r.kind = p.kind;
        r.peer = p.peer;
        r.sig = p.sig;
        r.src = p.src;
        r.dst = p.dst;
        r.dtype = p.sig.dtype;
        tp_->post(&r);
      }
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
        if (reqs[i].complete) finish(i, nullptr);
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
        timed_out = first;
        throw Error(Errc::kTimeout,
                    who() + ": " + what(first) + " timed out after " +
                        std::to_string(timeout_.count() / 1000.0).substr(0, 6) + " s with " +
                        std::to_string(r.done) + "/" + std::to_string(r.sig.bytes) +
                        " bytes moved, waiting on " + tp_->describe_peer(r.peer));
      }
      // Short naps: a send or recv queued meanwhile (the other half of an
      // exchange) is picked up within a millisecond.
      tp_->wait_activity(std::chrono::microseconds(
          std::min<uint64_t>((deadline[first] - now) / 1000, 1000)));
    }
  } catch (const Error& e0) {
    const Error e = forwarded(e0);
    // The timed-out operation's message already names it.
    std::string first_msg;
    for (size_t i = 0; i < open.size(); ++i) {
      if (!open[i]) continue;
      std::string msg =
          i == timed_out ? std::string(e.what()) : who() + ": " + what(i) + ": " + e.what();
      if (first_msg.empty()) first_msg = msg;
      finish(i, std::make_exception_ptr(Error(e.code(), msg)));
    }
    if (first_msg.empty()) first_msg = e.what();
    // Taken but never posted (a post threw): they never started.
    open.resize(ws.size(), 1);
    for (size_t i = reqs.size(); i < ws.size(); ++i)
      finish(i, std::make_exception_ptr(Error(e.code(), who() + ": " +
                                                            what(i) + " not started: " + first_msg)));
    set_broken(e.code(), first_msg);
  }
}

uint64_t CommImpl::next_p2p_seq(int peer, bool sending) {
  auto& v = sending ? p2p_send_seq_ : p2p_recv_seq_;
  if (v.empty()) v.assign(size_t(size_), 0);
  return ++v[size_t(peer)];
}

}  // namespace braid::comm
