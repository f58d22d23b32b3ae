// Test-only helpers for transport_test.cc, shm_transport_test.cc and the
// transport microbenchmark (header-only: the build compiles only
// tests/**/*_test.cc files).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "braid/env.h"
#include "braid/error.h"
#include "braid/store.h"
#include "comm/transport/transport.h"

namespace braid::comm::tutil {

inline constexpr const char* kPrefix = "tr/";
inline constexpr const char* kSecret = "test-secret";

// Forwards to a Store, prefixing keys, optionally sleeping before the first
// wait/get of keys that end with `slow_key`.
class ViewStore : public Store {
 public:
  ViewStore(Store& base, std::string prefix, std::string slow_key = "",
            std::chrono::milliseconds delay = std::chrono::milliseconds(0))
      : base_(base), prefix_(std::move(prefix)), slow_(std::move(slow_key)), delay_(delay) {}
  void set(const std::string& k, const Bytes& v) override { base_.set(prefix_ + k, v); }
  Bytes get(const std::string& k) override {
    maybe_delay(k);
    return base_.get(prefix_ + k);
  }
  int64_t add(const std::string& k, int64_t d) override { return base_.add(prefix_ + k, d); }
  Bytes compare_set(const std::string& k, const Bytes& e, const Bytes& d) override {
    return base_.compare_set(prefix_ + k, e, d);
  }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds t) override {
    std::vector<std::string> p;
    for (auto& k : keys) {
      maybe_delay(k);
      p.push_back(prefix_ + k);
    }
    base_.wait(p, t);
  }
  bool remove(const std::string& k) override { return base_.remove(prefix_ + k); }
  bool check(const std::string& k) override { return base_.check(prefix_ + k); }

 private:
  void maybe_delay(const std::string& k) {
    if (slow_.empty() || delayed_) return;
    if (k.size() >= slow_.size() && k.compare(k.size() - slow_.size(), slow_.size(), slow_) == 0) {
      delayed_ = true;
      std::this_thread::sleep_for(delay_);
    }
  }
  Store& base_;
  std::string prefix_, slow_;
  std::chrono::milliseconds delay_;
  bool delayed_ = false;
};

// A store view that holds back one key for a while (the attacker test).
class DelayedStore : public ViewStore {
 public:
  DelayedStore(std::shared_ptr<Store> base, const std::string& key, std::chrono::milliseconds d)
      : ViewStore(*base, "", key, d), keep_(std::move(base)) {}

 private:
  std::shared_ptr<Store> keep_;
};

inline MsgSig sig_of(CollOp op, uint64_t seq, uint64_t count, uint64_t bytes, DType dt = DType::kU8,
                     ReduceOp rop = ReduceOp::kSum, int32_t root = -1) {
  MsgSig s;
  s.op = op;
  s.seq = seq;
  s.count = count;
  s.bytes = bytes;
  s.dtype = dt;
  s.rop = rop;
  s.root = root;
  return s;
}

inline std::unique_ptr<Transport> make(int rank, int size, Store& store, const std::string& mode,
                                       std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  ViewStore view(store, kPrefix);
  TransportOptions o;
  o.mode = mode;
  o.secret = kSecret;
  o.timeout = timeout;
  return make_transport(rank, size, view, o);
}

// A send of `sig` from `src` to rank `to`, and a receive of the same
// signature from rank `from` into `dst`.
inline void send_recv_pair(int to, int from, const MsgSig& sig, const void* src, void* dst, Request& s,
                           Request& r) {
  s = Request{};
  s.kind = Request::Kind::kSend;
  s.peer = to;
  s.sig = sig;
  s.src = src;
  r = s;
  r.kind = Request::Kind::kRecv;
  r.peer = from;
  r.src = nullptr;
  r.dst = dst;
}

// Drives requests to completion, waiting up to `wait` at a time when
// nothing moved; Error(kTimeout) after `limit`.
inline void drive(Transport& t, const std::vector<Request*>& reqs,
                  std::chrono::milliseconds limit = std::chrono::seconds(30),
                  std::chrono::microseconds wait = std::chrono::microseconds(1000)) {
  uint64_t deadline = 0;
  for (unsigned idle = 0;;) {
    bool all = true;
    for (Request* r : reqs) all = all && r->complete;
    if (all) return;
    if (!t.progress()) {
      if ((++idle & 63) == 0) {  // the clock is not free: look now and then
        if (deadline == 0) deadline = now_ns() + uint64_t(limit.count()) * 1000000ull;
        else if (now_ns() > deadline) throw Error(Errc::kTimeout, "test: requests did not complete in time");
      }
      t.wait_activity(wait);
    }
  }
}

// Drives `reqs` expecting Error(code) whose message holds each of `parts`;
// `if_none` is the failure reported when they complete instead.
inline void expect_error(Transport& t, const std::vector<Request*>& reqs, Errc code,
                         const std::vector<std::string>& parts, const std::string& if_none) {
  try {
    drive(t, reqs);
    ADD_FAILURE() << if_none;
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_EQ(e.code(), code) << m;
    for (const std::string& p : parts) EXPECT_NE(m.find(p), std::string::npos) << "no \"" << p << "\" in: " << m;
  }
}

// The byte ring_exchange puts at `i` of message `msg` from rank `src`.
inline uint8_t pattern(int src, size_t msg, size_t i) { return uint8_t(src * 31 + msg * 7 + i * 13 + (i >> 9)); }

// Every rank sends messages of `sizes` to the next rank and receives them
// from the previous one, all posted at once (receives first on odd ranks,
// sends first on even ones), then `extra`; checks every byte received.
inline void ring_exchange(Transport& t, int rank, int size, const std::vector<size_t>& sizes, CollOp op,
                          const std::vector<Request*>& extra = {}) {
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  const size_t n = sizes.size();
  std::vector<std::vector<uint8_t>> out(n), in(n);
  std::vector<Request> sends(n), recvs(n);
  std::vector<Request*> all;
  for (size_t m = 0; m < n; ++m) {
    out[m].resize(sizes[m]);
    in[m].assign(sizes[m], 0xEE);
    for (size_t i = 0; i < sizes[m]; ++i) out[m][i] = pattern(rank, m, i);
    sends[m].kind = Request::Kind::kSend;
    sends[m].peer = next;
    sends[m].sig = sig_of(op, m, sizes[m], sizes[m]);
    sends[m].src = out[m].data();
    recvs[m] = sends[m];
    recvs[m].kind = Request::Kind::kRecv;
    recvs[m].peer = prev;
    recvs[m].src = nullptr;
    recvs[m].dst = in[m].data();
  }
  for (size_t m = 0; m < n; ++m) {
    if (rank % 2) t.post(&recvs[m]), t.post(&sends[m]);
    else t.post(&sends[m]), t.post(&recvs[m]);
    all.push_back(&sends[m]);
    all.push_back(&recvs[m]);
  }
  for (Request* r : extra) t.post(r), all.push_back(r);
  drive(t, all);
  for (size_t m = 0; m < n; ++m) {
    EXPECT_EQ(recvs[m].done, sizes[m]);
    EXPECT_EQ(sends[m].done, sizes[m]);
    for (size_t i = 0; i < sizes[m]; ++i)
      if (in[m][i] != pattern(prev, m, i)) {
        ADD_FAILURE() << "message " << m << " (" << sizes[m] << " bytes) differs at byte " << i;
        break;
      }
  }
}

// One 8-byte message around the ring, checked.
inline void ring_ping(Transport& t, int rank, int size) {
  uint64_t out = 0xABCD0000u + uint64_t(rank), in = 0;
  Request s, r;
  send_recv_pair((rank + 1) % size, (rank + size - 1) % size, sig_of(CollOp::kBarrier, 7, 1, 8), &out,
                 &in, s, r);
  t.post(&s);
  t.post(&r);
  drive(t, {&s, &r});
  EXPECT_EQ(in, 0xABCD0000u + uint64_t((rank + size - 1) % size));
}

}  // namespace braid::comm::tutil
