// make_transport: meets the peers through the store, picks a wire per peer
// (self / shm / tcp) and routes requests to it through a composite.
//
// Set-up: every rank publishes "info/<rank>" = pid, hostname, host identity
// and a random nonce. Two ranks share memory when their host identities are
// equal: hostname + kernel boot id + IPC and PID namespaces (so pidfds and
// POSIX shm both work between them). BRAID_HOST_ID overrides the identity
// (tests use it to fake several hosts on one machine). Rank 0's nonce names
// this communicator's shm segments and authenticates TCP hellos.
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "braid/env.h"
#include "braid/error.h"
#include "braid/log.h"
#include "braid/reduce.h"
#include "comm/transport/shm/shm_transport.h"
#include "comm/transport/tcp/tcp_transport.h"
#include "comm/transport/transport.h"
#include "comm/transport/wire.h"

namespace braid::comm {

const char* coll_op_name(CollOp op) {
  switch (op) {
    case CollOp::kBroadcast: return "broadcast";
    case CollOp::kReduce: return "reduce";
    case CollOp::kAllReduce: return "all_reduce";
    case CollOp::kAllGather: return "all_gather";
    case CollOp::kReduceScatter: return "reduce_scatter";
    case CollOp::kGather: return "gather";
    case CollOp::kScatter: return "scatter";
    case CollOp::kAllToAll: return "all_to_all";
    case CollOp::kAllToAllV: return "all_to_allv";
    case CollOp::kBarrier: return "barrier";
    case CollOp::kSend: return "send";
    case CollOp::kRecv: return "recv";
    case CollOp::kSplit: return "split";
    case CollOp::kProbe: return "probe";
  }
  return "unknown_op";
}

bool sig_matches(const MsgSig& a, const MsgSig& b) {
  return a.seq == b.seq && a.count == b.count && a.bytes == b.bytes && a.root == b.root &&
         a.op == b.op && a.dtype == b.dtype && a.rop == b.rop;
}

std::string describe_sig(const MsgSig& s, bool with_bytes) {
  // Values come off the wire: print out-of-range enums as numbers.
  std::ostringstream os;
  if (uint8_t(s.op) <= uint8_t(CollOp::kProbe)) os << coll_op_name(s.op);
  else os << "op#" << int(s.op);
  os << " seq " << s.seq << " count " << s.count << ' ';
  if (uint8_t(s.dtype) < kNumDTypes) os << dtype_name(s.dtype);
  else os << "dtype#" << int(s.dtype);
  if (s.op == CollOp::kSend || s.op == CollOp::kRecv || s.op == CollOp::kProbe) {
    // point to point: the root field carries the tag; no reduction
    os << " tag " << s.root;
    if (with_bytes) os << " (" << s.bytes << " bytes)";
    return os.str();
  }
  os << ' ';
  if (uint8_t(s.rop) < kNumReduceOps) os << reduce_op_name(s.rop);
  else os << "rop#" << int(s.rop);
  os << " root " << s.root;
  if (with_bytes) os << " (" << s.bytes << " bytes)";
  return os.str();
}

std::string rank_name(int rank, int world_rank) {
  std::string s = "rank " + std::to_string(rank);
  if (world_rank >= 0 && world_rank != rank) s += " (world rank " + std::to_string(world_rank) + ")";
  return s;
}

std::string describe_peer_info(const PeerInfo& p) {
  std::string s = "rank " + std::to_string(p.rank) + " (";
  if (p.world_rank >= 0 && p.world_rank != p.rank) s += "world rank " + std::to_string(p.world_rank) + ", ";
  return s + "pid " + std::to_string(p.pid) + " on host " + p.host + ")";
}

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

uint64_t spin_ns_for(int local_ranks, int cores) {
  int64_t us = env_int("BRAID_SPIN_US", -1);
  if (us >= 0) return uint64_t(us) * 1000;
  // With more ranks than cores, a spinning rank steals the core the peer it
  // waits for needs: yield after 2 µs. With a core per rank, spinning costs
  // nobody, and sleeping costs a futex wake-up and a cold core on resume:
  // waits here are mostly the peer's step-to-step jitter (0.1-0.5 ms), and
  // data-parallel MLP at dp=2 on 2 cores (native BLAS kernels) ran 84.9k
  // samples/s with a 20 µs spin against 87.0k with 200 µs (4 runs each in
  // ABBA order; the median exposed wait of the faster rank 0.247 → 0.220
  // ms). Longer waits still sleep.
  return local_ranks <= cores ? 200'000 : 2'000;
}

ShmWaitPlan shm_wait_plan(int local_ranks, int cores) {
  ShmWaitPlan w;
  const int64_t us = env_int("BRAID_YIELD_US", -1);
  w.yield_ns = us >= 0 ? uint64_t(us) * 1000 : local_ranks > cores ? 200'000 : 0;
  w.spin_ns = w.yield_ns > 0 && !env_str("BRAID_SPIN_US") ? 0 : spin_ns_for(local_ranks, cores);
  return w;
}

std::string affinity_hex() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return "";
  std::string hex;
  for (int c = CPU_SETSIZE - 4; c >= 0; c -= 4) {
    int nib = 0;
    for (int b = 0; b < 4; ++b) nib |= CPU_ISSET(c + b, &set) ? 1 << b : 0;
    if (nib != 0 || !hex.empty()) hex += "0123456789abcdef"[nib];
  }
  return hex;
}

int host_cores(const std::vector<PeerInfo>& peers, const std::string& host_id) {
  std::vector<bool> any;
  for (const PeerInfo& p : peers) {
    if (p.host_id != host_id) continue;
    const size_t n = p.cpus.size();
    if (n == 0) return usable_cores();  // a mask we could not read: our own view
    if (any.size() < 4 * n) any.resize(4 * n, false);
    for (size_t i = 0; i < n; ++i) {  // the last digit holds CPUs 0-3
      const char ch = p.cpus[n - 1 - i];
      const int nib = ch <= '9' ? ch - '0' : ch - 'a' + 10;
      for (int b = 0; b < 4; ++b)
        if (nib >> b & 1) any[4 * i + size_t(b)] = true;
    }
  }
  const int count = int(std::count(any.begin(), any.end(), true));
  return count > 0 ? count : usable_cores();
}

namespace {

// Messages to oneself: a send meets the recv posted for it.
class SelfWire final : public Wire {
 public:
  explicit SelfWire(const WireContext& ctx) : Wire(ctx) {}
  void abort(const std::string&) override {}
  void post(Request* r) override { (r->kind == Request::Kind::kSend ? sends_ : recvs_).push(r); }
  bool progress() override {
    bool moved = false;
    while (!sends_.empty() && !recvs_.empty()) {
      Request* s = sends_.front();
      Request* r = recvs_.front();
      if (!sig_matches(s->sig, r->sig)) throw_mismatch(*r, s->sig, "self");
      size_t n = r->sig.bytes;
      if (n) {
        if (r->kind == Request::Kind::kRecv) {
          if (r->dst != s->src) std::memmove(r->dst, s->src, n);
        } else {
          reduce2(r->dst, r->acc, s->src, n / dtype_size(r->dtype), r->dtype, r->rop);
        }
      }
      s->done = r->done = n;
      s->complete = r->complete = true;
      sends_.pop();
      recvs_.pop();
      moved = true;
    }
    return moved;
  }
  void wait_activity(std::chrono::microseconds) override {}
  std::string kind_to(int) const override { return "self"; }
  bool busy() const override { return !sends_.empty() || !recvs_.empty(); }
  bool poll_ready() override { return false; }

 private:
  ReqQueue sends_, recvs_;
};

class CompositeTransport final : public Transport {
 public:
  // cores: host_id -> host_cores().
  CompositeTransport(int rank, std::vector<PeerInfo> peers, std::map<std::string, int> cores)
      : rank_(rank), peers_(std::move(peers)), cores_(std::move(cores)) {}
  int cores_of(int peer) const override { return cores_.at(peers_.at(size_t(peer)).host_id); }

  void post(Request* r) override {
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

  bool progress() override {
    bool moved = false;
    for (Wire* w : wires_) moved |= w->progress();
    return moved;
  }

  void wait_activity(std::chrono::microseconds timeout) override {
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

  int exited_peer() override {
    for (Wire* w : wires_)
      if (int p = w->exited_peer(); p >= 0) return p;
    return -1;
  }
  std::string how_gone(int peer) const override {
    if (peer < 0 || size_t(peer) >= route_.size() || !route_[size_t(peer)]) return "exited";
    return route_[size_t(peer)]->how_gone(peer);
  }
  void abort(const std::string& why) override {
    for (Wire* w : wires_) w->abort(why);
  }
  std::string peer_abort_reason() const override {
    for (Wire* w : wires_)
      if (std::string r = w->peer_abort_reason(); !r.empty()) return r;
    return {};
  }

  std::string kind_to(int peer) const override {
    if (peer < 0 || size_t(peer) >= route_.size()) return "none";
    return route_[size_t(peer)]->kind_to(peer);
  }
  std::string describe_peer(int peer) const override {
    if (peer < 0 || size_t(peer) >= peers_.size()) return "rank " + std::to_string(peer);
    return describe_peer_info(peers_[size_t(peer)]);
  }
  std::string describe_self() const override {
    return rank_name(rank_, peers_[size_t(rank_)].world_rank);
  }

  void add(std::unique_ptr<Wire> w, const std::vector<int>& peers, bool waitable) {
    if (route_.empty()) route_.assign(peers_.size(), nullptr);
    for (int p : peers) route_[size_t(p)] = w.get();
    wires_.push_back(w.get());
    if (waitable) waitable_.push_back(w.get());
    else self_ = w.get();
    owned_.push_back(std::move(w));
  }

 private:
  int rank_;
  std::vector<PeerInfo> peers_;
  std::map<std::string, int> cores_;  // host_id -> host_cores
  std::vector<std::unique_ptr<Wire>> owned_;
  std::vector<Wire*> wires_, waitable_, route_;
  Wire* self_ = nullptr;
};

std::string read_line(const char* path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

std::string ns_id(const char* path) {
  char buf[128];
  ssize_t n = ::readlink(path, buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, size_t(n)) : std::string("?");
}

std::string host_identity() {
  if (auto o = env_str("BRAID_HOST_ID")) return *o;
  return hostname() + "|" + read_line("/proc/sys/kernel/random/boot_id") + "|" + ns_id("/proc/self/ns/ipc") +
         "|" + ns_id("/proc/self/ns/pid");
}

// info value: "pid\nnonce\nhost\nhost_id\ncpus\nworld_rank"
std::string encode_info(const PeerInfo& p) {
  char nonce[17];
  std::snprintf(nonce, sizeof nonce, "%016llx", static_cast<unsigned long long>(p.nonce));
  return std::to_string(p.pid) + "\n" + nonce + "\n" + p.host + "\n" + p.host_id + "\n" + p.cpus +
         "\n" + std::to_string(p.world_rank);
}

PeerInfo decode_info(int rank, const std::string& v) {
  PeerInfo p;
  p.rank = rank;
  std::istringstream is(v);
  std::string pid, nonce;
  std::getline(is, pid);
  std::getline(is, nonce);
  std::getline(is, p.host);
  std::getline(is, p.host_id);
  std::getline(is, p.cpus);
  std::string world;
  std::getline(is, world);
  p.world_rank = world.empty() ? -1 : std::atoi(world.c_str());
  if (p.cpus.find_first_not_of("0123456789abcdef") != std::string::npos) p.cpus.clear();
  p.pid = std::atoi(pid.c_str());
  p.nonce = std::strtoull(nonce.c_str(), nullptr, 16);
  if (p.pid <= 0 || nonce.size() != 16 || p.host_id.empty())
    throw Error(Errc::kProtocol, "transport set-up: malformed info of rank " + std::to_string(rank));
  return p;
}

}  // namespace

std::unique_ptr<Transport> make_transport(int rank, int size, Store& store, const TransportOptions& opt) {
  BRAID_CHECK_ARG(size >= 1 && rank >= 0 && rank < size,
                  "make_transport: rank " + std::to_string(rank) + " of size " + std::to_string(size));
  BRAID_CHECK_ARG(opt.mode == "auto" || opt.mode == "tcp" || opt.mode == "shm",
                  "transport mode '" + opt.mode + "' (BRAID_TRANSPORT) is not auto, shm or tcp");
  WireContext ctx;
  ctx.rank = rank;
  ctx.size = size;
  ctx.store = &store;
  ctx.opt = &opt;
  ctx.deadline_ns = now_ns() + uint64_t(std::max<int64_t>(opt.timeout.count(), 0)) * 1000000;

  PeerInfo me;
  me.rank = rank;
  me.pid = int(::getpid());
  me.host = hostname();
  me.host_id = host_identity();
  me.cpus = affinity_hex();
  me.world_rank = opt.world_rank >= 0 ? opt.world_rank : rank;
  if (::getrandom(&me.nonce, sizeof me.nonce, 0) != sizeof me.nonce)
    me.nonce = now_ns() ^ (uint64_t(me.pid) << 32);
  store.set_str("info/" + std::to_string(rank), encode_info(me));

  std::vector<std::string> keys;
  for (int p = 0; p < size; ++p) keys.push_back("info/" + std::to_string(p));
  try {
    store.wait(keys, std::chrono::milliseconds(std::max<int64_t>(ctx.ms_left(), 1)));
  } catch (const Error& e) {
    if (e.code() != Errc::kTimeout) throw;
    std::string missing;
    for (int p = 0; p < size; ++p)
      if (!store.check(keys[size_t(p)])) missing += (missing.empty() ? "" : ", ") + std::to_string(p);
    throw Error(Errc::kTimeout, "rank " + std::to_string(rank) + ": transport set-up timed out after " +
                                    std::to_string(opt.timeout.count()) + " ms waiting for peer rank(s) " +
                                    missing + " to join");
  }
  ctx.peers.resize(size_t(size));
  for (int p = 0; p < size; ++p)
    ctx.peers[size_t(p)] = p == rank ? me : decode_info(p, store.get_str(keys[size_t(p)]));
  char tok[17];
  std::snprintf(tok, sizeof tok, "%016llx", static_cast<unsigned long long>(ctx.peers[0].nonce));
  ctx.token = tok;

  std::vector<int> shm_peers, tcp_peers;
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    bool same_host = ctx.peers[size_t(p)].host_id == me.host_id;
    if (opt.mode == "shm" && !same_host)
      throw Error(Errc::kNotSupported, "BRAID_TRANSPORT=shm needs every rank on one host, but " +
                                           describe_peer_info(ctx.peers[size_t(p)]) + " is not on " +
                                           me.host + " with rank " + std::to_string(rank));
    (opt.mode != "tcp" && same_host ? shm_peers : tcp_peers).push_back(p);
  }

  std::map<std::string, int> cores;  // host_id -> host_cores
  for (const PeerInfo& p : ctx.peers)
    if (!cores.count(p.host_id)) cores[p.host_id] = host_cores(ctx.peers, p.host_id);
  ctx.host_cores = cores[me.host_id];

  auto t = std::make_unique<CompositeTransport>(rank, ctx.peers, std::move(cores));
  t->add(std::make_unique<SelfWire>(ctx), {rank}, false);
  // shm first, then tcp, on every rank: the shm groups never wait on TCP.
  if (!shm_peers.empty()) t->add(make_shm_wire(ctx, shm_peers), shm_peers, true);
  if (!tcp_peers.empty()) t->add(make_tcp_wire(ctx, tcp_peers), tcp_peers, true);
  BRAID_LOG(kDebug, "transport: rank " << rank << " of " << size << ": " << shm_peers.size()
                                       << " shm peer(s), " << tcp_peers.size() << " tcp peer(s)");
  return t;
}

}  // namespace braid::comm
