#include "comm/algo/context.h"

#include <algorithm>
#include <sstream>

#include "braid/env.h"
#include "braid/error.h"
#include "comm/algo/algorithms.h"
#include "comm/transport/shm/stream_copy.h"

namespace braid::comm {

Context::Context(Transport& tp, int rank, int size, const MsgSig& call, uint64_t timeout_ns,
                 std::function<std::string()> describe, ContextPool& pool)
    : tp_(tp), rank_(rank), size_(size), ring_pos_(rank), call_(call), timeout_ns_(timeout_ns),
      describe_(std::move(describe)), pool_(pool), reqs_(pool.reqs) {
  reqs_.clear();
}

void Context::set_ring(const std::vector<int>* ring) {
  ring_ = ring;
  ring_pos_ = rank_;
  if (ring_)
    for (int p = 0; p < size_; ++p)
      if ((*ring_)[size_t(p)] == rank_) ring_pos_ = p;
}

Request* Context::post(Request::Kind kind, int peer, size_t bytes, uint32_t step) {
  reqs_.emplace_back();
  Request* r = &reqs_.back();
  r->kind = kind;
  r->peer = peer;
  r->sig = call_;
  r->sig.bytes = bytes;
  r->sig.step = step;
  r->dtype = call_.dtype;
  r->rop = call_.rop == ReduceOp::kAvg ? ReduceOp::kSum : call_.rop;
  return r;
}

Request* Context::send(int peer, const void* buf, size_t bytes, uint32_t step, void* copy_to) {
  Request* r = post(Request::Kind::kSend, peer, bytes, step);
  r->src = buf;
  r->copy_to = copy_to;
  tp_.post(r);
  return r;
}

Request* Context::recv(int peer, void* buf, size_t bytes, uint32_t step) {
  Request* r = post(Request::Kind::kRecv, peer, bytes, step);
  r->dst = buf;
  tp_.post(r);
  return r;
}

Request* Context::recv_final(int peer, void* buf, size_t bytes, size_t out_bytes, uint32_t step) {
  Request* r = post(Request::Kind::kRecv, peer, bytes, step);
  r->dst = buf;
  r->stream_dst = stream_out(out_bytes);
  tp_.post(r);
  return r;
}

void Context::copy(void* dst, const void* src, size_t bytes) {
  if (dst == src || bytes == 0) return;
  algo::copy_if_distinct(dst, src, bytes);
  tp_.copied(bytes);
}

Request* Context::recv_reduce(int peer, void* dst, const void* acc, size_t count, uint32_t step) {
  Request* r = post(Request::Kind::kRecvReduce, peer, count * esize(), step);
  r->dst = dst;
  r->acc = acc;
  tp_.post(r);
  return r;
}

bool Context::poll() { return tp_.progress(); }

void Context::idle() {
  // Spin a little on progress before paying for a sleep.
  if (++spins_ < 64) return;
  spins_ = 0;
  uint64_t now = now_ns();
  if (deadline_ == 0) {
    deadline_ = now + timeout_ns_;
    next_watch_ = now + kStallNs;
  }
  if (now > deadline_) timeout_error();
  if (watch_ && now >= next_watch_) {
    check_stall();
    next_watch_ = now_ns() + kStallEveryNs;
  }
  uint64_t left_us = (deadline_ - now) / 1000;
  tp_.wait_activity(std::chrono::microseconds(std::min<uint64_t>(left_us, 20000)));
}

void Context::wait(Request* r) {
  while (!r->complete) {
    if (!tp_.progress()) idle();
  }
}

void Context::wait_all() {
  while (first_open_ < reqs_.size()) {
    if (reqs_[first_open_].complete) {
      ++first_open_;
      continue;
    }
    if (!tp_.progress()) idle();
  }
}

void* Context::scratch(size_t bytes) {
  if (bufs_used_ == pool_.bufs.size()) pool_.bufs.emplace_back();
  auto& b = pool_.bufs[bufs_used_];
  if (b.size() < bytes) {
    const size_t old = b.size(), want = std::max<size_t>(bytes, 256);
    if (pool_.kept + (want - old) > ContextPool::kKeepBytes) {
      large_.emplace_back(bytes);  // over the budget: this call only
      return large_.back().data();
    }
    b.resize(want);
    pool_.kept += want - old;
  }
  ++bufs_used_;
  return b.data();
}

void Context::check_stall() {
  std::vector<int> peers;
  for (const Request& r : reqs_)
    if (!r.complete && std::find(peers.begin(), peers.end(), r.peer) == peers.end())
      peers.push_back(r.peer);
  const auto d = watch_->stalled(call_, peers);
  if (!d) return;
  throw Error(Errc::kMismatch,
              "the ranks disagree on call seq " + std::to_string(d->ours.seq) + ": " +
                  tp_.describe_self() + " called " + describe_sig(d->ours, false) + ", but " +
                  tp_.describe_peer(d->peer) + " called " + describe_sig(d->theirs, false) +
                  " (found through the store while both waited)");
}

void Context::timeout_error() {
  std::ostringstream os;
  os << tp_.describe_self() << ": " << describe_() << " timed out; waiting on ";
  size_t done = 0, total = 0;
  std::vector<std::string> open;
  for (auto& r : reqs_) {
    done += r.done;
    total += r.sig.bytes;
    if (!r.complete) {
      std::string s = std::string(r.kind == Request::Kind::kSend ? "send to " : "recv from ") +
                      tp_.describe_peer(r.peer) + " (" + std::to_string(r.done) + "/" +
                      std::to_string(r.sig.bytes) + " bytes)";
      if (open.size() < 8) open.push_back(s);
    }
  }
  for (size_t i = 0; i < open.size(); ++i) os << (i ? ", " : "") << open[i];
  os << "; " << done << " of " << total << " bytes done";
  throw Error(Errc::kTimeout, os.str());
}

}  // namespace braid::comm
