#include "plan/sim/engine.h"

#include <algorithm>
#include <cstring>

#include "braid/error.h"
#include "braid/reduce.h"

namespace braid::plan::sim {

using comm::Request;

Engine::Engine(Network& net, const EngineConfig& cfg)
    : net_(net), cfg_(cfg), ranks_(size_t(net.ranks())) {}

Engine::~Engine() = default;

void Engine::spawn(int rank, std::function<void()> body) {
  auto& st = ranks_.at(size_t(rank));
  st.fiber = std::make_unique<Fiber>(std::move(body));
  runnable_.push_back(rank);
}

void Engine::schedule(double t, int rank, Request* r) {
  events_.push({t, seq_++, rank, r});
}

void Engine::run() {
  std::vector<int> batch;
  for (;;) {
    while (!runnable_.empty()) {
      batch.swap(runnable_);
      runnable_.clear();
      for (int r : batch) {
        RankState& st = ranks_[size_t(r)];
        current_ = r;
        st.fiber->resume();  // rethrows the rank's error
        current_ = -1;
        if (st.fiber->done() && st.finished < 0) {
          st.finished = now_;
          st.fiber.reset();  // its stack back at once: thousands of ranks
        }
      }
      batch.clear();
    }
    if (events_.empty()) break;
    // Every event of the next instant, then the ranks they woke.
    const double t = events_.top().t;
    now_ = t;
    while (!events_.empty() && events_.top().t == t) {
      Event e = events_.top();
      events_.pop();
      if (e.r != nullptr) {
        e.r->done = e.r->sig.bytes;
        e.r->complete = true;
      }
      RankState& st = ranks_[size_t(e.rank)];
      if (e.r != nullptr) ++st.completed;  // else a compute's end
      if (st.waiting) {
        st.waiting = false;
        runnable_.push_back(e.rank);
      }
    }
  }
  std::string stuck;
  int count = 0;
  for (size_t r = 0; r < ranks_.size(); ++r)
    if (ranks_[r].fiber && !ranks_[r].fiber->done()) {
      if (++count <= 8) stuck += (stuck.empty() ? "" : ", ") + std::to_string(r);
    }
  if (count > 0)
    throw Error(Errc::kInternal, "simulator: deadlock at t = " + std::to_string(now_) + " s: " +
                                     std::to_string(count) + " ranks wait for messages that "
                                     "never come (ranks " + stuck + (count > 8 ? ", ..." : "") + ")");
}

void Engine::block(int self) {
  RankState& st = ranks_[size_t(self)];
  if (!st.met.empty()) {  // receives met while it ran, after its sends
    std::vector<RankState::Met> met;
    met.swap(st.met);
    for (RankState::Met& x : met) meet(x.src, self, chan(x.src, self), x.p, x.m, nullptr);
  }
  st.waiting = true;
  st.fiber->yield();
}

bool Engine::progress(int self) {
  RankState& st = ranks_[size_t(self)];
  if (st.completed == 0) block(self);
  st.completed = 0;
  return true;
}

void Engine::compute(int self, double seconds, const char* what) {
  // On a core of the host's pool, if its ranks outnumber its cores.
  const double start = net_.compute(self, now_, now_, seconds);
  const double until = start + seconds;
  if (cfg_.trace && seconds > 0) cfg_.trace->span(net_.host_of(self), self, what, start, until);
  schedule(until, self, nullptr);
  // Messages completing meanwhile wake the rank too; their count is left
  // for progress().
  while (now_ < until) block(self);
}

Engine::Chan& Engine::chan(int src, int dst) {
  RankState& st = ranks_[size_t(dst)];
  if (st.last_src != src) {  // a rank mostly hears from the peer it heard from last
    st.last = &st.in[src];   // (map nodes do not move)
    st.last_src = src;
  }
  return *st.last;
}

void Engine::meet(int src, int dst, Chan& ch, const Pending& p, Msg& m, const void* live_src) {
  Request* r = p.r;
  if (!comm::sig_matches(r->sig, m.sig) || r->sig.bytes != m.sig.bytes)
    throw Error(Errc::kMismatch, "simulator: rank " + std::to_string(dst) + " expected " +
                                     comm::describe_sig(r->sig) + " from rank " +
                                     std::to_string(src) + ", which sent " +
                                     comm::describe_sig(m.sig));
  double done = std::max({m.arrival, p.posted, ch.last_done});
  // What the receiver's core does with the message: reduce it (from the
  // sender's slot, γ), or, where its own core copies it out, copy it.
  const bool reduce = r->kind == Request::Kind::kRecvReduce;
  const double dur = reduce ? m.bytes * cfg_.gamma_s_per_b : net_.copy_out_s(src, dst, m.bytes);
  if (dur > 0) {
    RankState& st = ranks_[size_t(dst)];
    const double t0 = net_.compute(dst, now_, std::max(done, st.cpu_free), dur);
    done = t0 + dur;
    st.cpu_free = done;
    if (cfg_.trace) cfg_.trace->span(net_.host_of(dst), dst, reduce ? "reduce" : "copy out", t0, done);
  }
  ch.last_done = done;
  if (cfg_.carry_data && r->sig.bytes > 0) {
    const void* in = live_src ? live_src : m.data.data();
    if (r->kind == Request::Kind::kRecvReduce) {
      reduce2(r->dst, r->acc, in, r->sig.bytes / dtype_size(r->dtype), r->dtype, r->rop);
    } else {
      std::memmove(r->dst, in, r->sig.bytes);
    }
  }
  schedule(done, dst, r);
}

void Engine::post(int self, Request* r) {
  const int peer = r->peer;
  if (peer < 0 || peer >= net_.ranks())
    throw Error(Errc::kInternal, "simulator: rank " + std::to_string(self) +
                                     " posted a message to rank " + std::to_string(peer));
  if (r->kind == Request::Kind::kSend) {
    const double bytes = double(r->sig.bytes) * cfg_.byte_scale;
    const Flow f = net_.send(self, peer, now_, bytes);
    if (cfg_.trace) {
      char args[96];
      std::snprintf(args, sizeof args, "{\"bytes\":%.0f,\"waited_us\":%.3f}", bytes, f.waited * 1e6);
      cfg_.trace->span(net_.host_of(self), self,
                       std::string("to ") + std::to_string(peer) + " (" + link_kind_name(f.kind) + ")",
                       f.start, f.arrival, args);
    }
    if (r->copy_to != nullptr && cfg_.carry_data) std::memcpy(r->copy_to, r->src, r->sig.bytes);
    schedule(f.inject_end, self, r);
    Chan& ch = chan(self, peer);
    Msg m;
    m.arrival = f.arrival;
    m.bytes = bytes;
    m.sig = r->sig;
    if (!ch.recvs.empty()) {
      Pending p = ch.recvs.front();
      ch.recvs.pop_front();
      meet(self, peer, ch, p, m, r->src);
      return;
    }
    if (cfg_.carry_data) {
      const auto* s = static_cast<const uint8_t*>(r->src);
      m.data.assign(s, s + r->sig.bytes);
    }
    ch.msgs.push_back(std::move(m));
    return;
  }
  Chan& ch = chan(peer, self);
  Pending p{r, now_};
  if (!ch.msgs.empty()) {
    Msg m = std::move(ch.msgs.front());
    ch.msgs.pop_front();
    ranks_[size_t(self)].met.push_back({peer, p, std::move(m)});
    return;
  }
  ch.recvs.push_back(p);
}

SimTransport::SimTransport(Engine& e, const std::vector<int>* members, int me)
    : e_(e), members_(members), me_(me), self_(global(me)) {}

int SimTransport::global(int group_rank) const {
  return members_ ? (*members_)[size_t(group_rank)] : group_rank;
}

void SimTransport::post(comm::Request* r) {
  // The engine sees global ranks; the caller's request keeps its own.
  const int group_peer = r->peer;
  r->peer = global(group_peer);
  e_.post(self_, r);
  r->peer = group_peer;
}

bool SimTransport::progress() { return e_.progress(self_); }

void SimTransport::copied(size_t bytes) { e_.copied(self_, double(bytes)); }

std::string SimTransport::describe_peer(int peer) const {
  return "simulated rank " + std::to_string(global(peer));
}

std::string SimTransport::describe_self() const {
  return "simulated rank " + std::to_string(self_);
}

}  // namespace braid::plan::sim
