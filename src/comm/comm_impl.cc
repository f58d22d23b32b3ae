#include "comm/comm_impl.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <map>
#include <cstdio>
#include <set>
#include <sstream>

#include "braid/env.h"
#include "braid/log.h"
#include "braid/topology.h"
#include <nlohmann/json.hpp>
#include "comm/algo/algorithms.h"
#include "comm/probe.h"

namespace braid::comm {
namespace {

// Every live communicator of the process (the flight recorder's SIGUSR1
// dump, and a failure abandoning the rest of its family).
std::mutex g_registry_mu;
std::set<CommImpl*>& registry() {
  static auto* s = new std::set<CommImpl*>;
  return *s;
}

uint64_t next_family() {
  static std::atomic<uint64_t> n{0};
  return ++n;
}

std::string describe_call(const MsgSig& s, const std::string& algo) {
  std::ostringstream os;
  os << coll_op_name(s.op) << " seq " << s.seq << " (count " << s.count << " "
     << dtype_name(s.dtype);
  if (s.op == CollOp::kAllReduce || s.op == CollOp::kReduce || s.op == CollOp::kReduceScatter)
    os << " " << reduce_op_name(s.rop);
  if (s.op == CollOp::kSend || s.op == CollOp::kRecv) os << " tag " << s.root;
  else if (s.root >= 0) os << " root " << s.root;
  os << ", " << algo << ")";
  return os.str();
}

}  // namespace

std::string CommImpl::agree_cost_text(Store& pstore) const {
  // Every rank parses its own file first, so that a bad BRAID_TUNING fails
  // every rank that has it, not only rank 0 while the others wait on the
  // store. Then all take rank 0's text.
  const std::string mine = read_tuning();
  parse_cost_params(mine, default_tuning_path());
  if (size_ == 1) return mine;
  if (rank_ == 0) {
    pstore.set_str("cost", mine);
    return mine;
  }
  return pstore.get_str("cost");  // parsed by make_selector
}

void CommImpl::make_selector(int nhosts, int max_local, bool any_tcp, bool all_shm, int cores) {
  selector_ = std::make_unique<Selector>(size_, any_tcp, parse_cost_params(cost_text_, "of rank 0"),
                                         nhosts, max_local, all_shm, cores);
  selector_->load_env_overrides();
  last_choice_ = LastChoice{};
}

bool CommImpl::probe_links(Store& pstore, int max_local, int cores) {
  if (size_ < 2) return false;
  std::vector<ProbeLink> plan;
  if (rank_ == 0) {
    std::vector<ProbeLink> kinds;  // rank 0's lowest peer over each transport
    for (const char* k : {"shm", "tcp"})
      for (int p = 1; p < size_; ++p)
        if (tp_->kind_to(p) == k) {
          kinds.push_back({k, p});
          break;
        }
    // Without a cache to write to, every job would probe again: not cheap.
    if (!default_tuning_path().empty())
      plan = probe_plan(cost_text_, kinds, size_, max_local, cores);
    pstore.set_str("probe", format_plan(plan));
  } else {
    plan = parse_plan(pstore.get_str("probe"));
  }
  if (plan.empty()) return false;
  std::string text = cost_text_;
  const double t0 = now_s();
  for (const auto& l : plan) {
    if (rank_ != 0 && rank_ != l.peer) continue;
    const int other = rank_ == 0 ? l.peer : 0;
    auto send = [&](const void* b, size_t n) {
      launch_p2p(true, b, nullptr, n, DType::kU8, other, -1, n, false, CollOp::kProbe);
    };
    auto recv = [&](void* b, size_t n) {
      launch_p2p(false, nullptr, b, n, DType::kU8, other, -1, n, false, CollOp::kProbe);
    };
    const ProbeSample s = probe_link(rank_ == 0, send, recv);
    // Every message of the probe has been matched, so both ends can start
    // the pair's numbering afresh: the job's own first send is seq 1.
    p2p_send_seq_[size_t(other)] = p2p_recv_seq_[size_t(other)] = 0;
    if (rank_ != 0) continue;
    BRAID_LOG(kInfo, "probed the " << l.kind << " link to rank " << l.peer << ": alpha "
                                   << s.alpha_s * 1e6 << " us, " << s.gbps << " GB/s, reduce "
                                   << s.reduce_gbps << " GB/s, core share " << s.core_share);
    // Ranks that shared their cores with other work measured that moment,
    // not the machine: keep what there was, and let a later job probe.
    if (s.core_share < kMinCoreShare) continue;
    text = merge_probe(text, l.kind, s, hostname());
  }
  if (rank_ == 0 && text != cost_text_) {
    const std::string path = default_tuning_path();
    try {
      write_tuning(path, text);
      BRAID_LOG(kInfo, "cost model probed in " << (now_s() - t0) * 1e3 << " ms, cached in "
                                               << path);
    } catch (const std::exception& e) {
      // The job goes on with the probed figures; the next one probes again.
      BRAID_LOG(kWarn, "probed cost parameters not cached: " << e.what());
    }
  }
  if (rank_ == 0) pstore.set_str("cost/probed", text);
  else text = pstore.get_str("cost/probed");
  const bool changed = text != cost_text_;
  cost_text_ = text;
  return changed;
}

CommImpl::CommImpl(int rank, int size, std::shared_ptr<Store> store, std::string prefix,
                   const CommOptions& opt, std::shared_ptr<void> keepalive, Role role,
                   const CommImpl* parent)
    : rank_(rank), size_(size), world_rank_(parent ? parent->world_rank_ : rank),
      family_(parent ? parent->family_ : next_family()), store_(std::move(store)),
      prefix_(std::move(prefix)), opt_(opt),
      keepalive_(std::move(keepalive)) {
  BRAID_CHECK_ARG(size >= 1, "communicator size must be >= 1, got " + std::to_string(size));
  BRAID_CHECK_ARG(rank >= 0 && rank < size, "rank " + std::to_string(rank) +
                                                " out of range for size " + std::to_string(size));
  BRAID_CHECK_ARG(store_ != nullptr, "communicator needs a store");
  timeout_ = opt.timeout.count() > 0 ? opt.timeout : default_timeout();
  chunk_bytes_ = size_t(env_int("BRAID_CHUNK_BYTES", 1 << 20));
  BRAID_CHECK_ARG(chunk_bytes_ >= 64, "BRAID_CHUNK_BYTES must be at least 64");
  TransportOptions topt;
  topt.mode = opt.transport.empty() ? env_str("BRAID_TRANSPORT").value_or("auto") : opt.transport;
  if (topt.mode != "auto" && topt.mode != "shm" && topt.mode != "tcp")
    throw Error(Errc::kInvalidArgument,
                "transport must be auto, shm or tcp; got '" + topt.mode + "'");
  topt.secret = !opt.secret.empty() ? opt.secret : env_str("BRAID_SECRET").value_or("");
  topt.timeout = timeout_;
  topt.world_rank = world_rank_;
  topt.ordered_seqs = true;
  if (role == Role::kPointToPoint) topt.max_shm_slots = kPointToPointShmSlots;
  auto pstore = make_prefix_store(store_, prefix_);
  desync_ = std::make_unique<Desync>(pstore, rank_);
  tp_ = make_transport(rank_, size_, *pstore, topt);
  bool any_tcp = false, all_shm = true;
  for (int p = 0; p < size_; ++p) {
    any_tcp |= tp_->kind_to(p) == "tcp";
    if (p != rank_) all_shm &= tp_->kind_to(p) == "shm";
  }
  build_topology(*pstore, role == Role::kUser);
  int nhosts = 1, max_local = 1;
  {
    std::map<std::string, int> per_host;
    for (auto& h : hosts_) ++per_host[h];
    nhosts = int(per_host.size());
    for (auto& [h, k] : per_host) max_local = std::max(max_local, k);
  }
  // Every rank must choose the same algorithm for a call, so what the
  // choice depends on is the same everywhere: rank 0's cost parameters (a
  // host may have its own tuning file, or none; a sub-communicator takes
  // its parent's), and the cores of the host with the fewest (each rank
  // sees its own host's).
  int cores = tp_->cores_of(0);
  for (int p = 1; p < size_; ++p) cores = std::min(cores, tp_->cores_of(p));
  cost_text_ = parent ? parent->cost_text_ : agree_cost_text(*pstore);
  // The hierarchy exists only with several hosts, and is built below.
  const bool hier = role == Role::kUser && !env_flag("BRAID_NO_HIER") && nhosts > 1 && max_local > 1;
  const int sel_hosts = hier ? nhosts : 1;
  make_selector(sel_hosts, max_local, any_tcp, all_shm, cores);
  // The probe's messages go through this communicator, so it needs a
  // selector already; a changed text gets a new one.
  if (!parent && probe_links(*pstore, max_local, cores))
    make_selector(sel_hosts, max_local, any_tcp, all_shm, cores);
  if (hier) build_hierarchy();
  if (role == Role::kUser)
    p2p_ = std::make_unique<CommImpl>(rank_, size_, store_, prefix_ + "p2p/", opt_, nullptr,
                                      Role::kPointToPoint, this);
  host_ring_.peers_on_shm = all_shm && size_ > 1;
  std::lock_guard<std::mutex> l(g_registry_mu);
  registry().insert(this);
}

void CommImpl::build_topology(Store& pstore, bool with_topology_file) {
  pstore.set_str("host/" + std::to_string(rank_), hostname());
  hosts_.resize(size_t(size_));
  for (int r = 0; r < size_; ++r) hosts_[r] = pstore.get_str("host/" + std::to_string(r));
  if (auto topo = env_str("BRAID_TOPOLOGY"); topo && with_topology_file) {
    // A JSON matrix of link bandwidths between ranks, e.g. from nvidia-smi
    // topo or a cluster description.
    std::ifstream f(*topo);
    if (!f) throw Error(Errc::kInvalidArgument, "BRAID_TOPOLOGY: cannot open " + *topo);
    std::vector<std::vector<double>> bw;
    try {
      bw = nlohmann::json::parse(f).get<std::vector<std::vector<double>>>();
    } catch (const std::exception& e) {
      throw Error(Errc::kInvalidArgument, "BRAID_TOPOLOGY " + *topo + ": " + e.what());
    }
    if (int(bw.size()) != size_)
      throw Error(Errc::kInvalidArgument, "BRAID_TOPOLOGY " + *topo + " has " +
                                              std::to_string(bw.size()) + " rows for " +
                                              std::to_string(size_) + " ranks");
    ring_ = ring_order_from_bandwidth(bw);
  } else {
    ring_ = ring_order_from_hosts(hosts_);
  }
}

void CommImpl::build_hierarchy() {
  std::vector<std::string> order;  // hosts by first rank
  for (auto& h : hosts_)
    if (std::find(order.begin(), order.end(), h) == order.end()) order.push_back(h);
  int host_idx = int(std::find(order.begin(), order.end(), hosts_[rank_]) - order.begin());
  int local_rank = 0, local_size = 0, max_local = 0;
  for (int r = 0; r < size_; ++r) {
    if (hosts_[r] != hosts_[rank_]) continue;
    if (r < rank_) ++local_rank;
    ++local_size;
  }
  for (auto& h : order) max_local = std::max<int>(max_local, int(std::count(hosts_.begin(), hosts_.end(), h)));
  if (order.size() < 2 || max_local < 2) return;
  CommOptions o = opt_;
  o.timeout = timeout_;
  local_ = std::make_unique<CommImpl>(local_rank, local_size, store_,
                                      prefix_ + "local" + std::to_string(host_idx) + "/", o,
                                      nullptr, Role::kHierarchy, this);
  if (local_rank == 0)
    leaders_ = std::make_unique<CommImpl>(host_idx, int(order.size()), store_,
                                          prefix_ + "leaders/", o, nullptr, Role::kHierarchy,
                                          this);
}

CommImpl::~CommImpl() {
  {
    std::lock_guard<std::mutex> l(g_registry_mu);
    registry().erase(this);
  }
  {
    std::unique_lock<std::mutex> l(qmu_);
    // Let queued work finish (or fail) before the transport goes away.
    qcv_.wait(l, [&] { return queue_.empty() && !worker_busy_; });
    stop_ = true;
  }
  qcv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

const std::string& CommImpl::choose(CollOp op, size_t bytes, DType t) {
  LastChoice& lc = last_choice_;
  if (lc.algo && lc.op == op && lc.bytes == bytes && lc.t == t) return *lc.algo;
  const std::string& a = selector_->choose(op, bytes, t);
  lc = LastChoice{op, bytes, t, &a};
  return a;
}

std::shared_ptr<WorkState> CommImpl::completed_work() {
  // One state for every call that completed inline, never freed. The
  // handles point at it without owning it (the aliasing constructor with an
  // empty owner), so making and dropping one touches no reference count: two
  // atomic read-modify-writes fewer per blocking call.
  static WorkState* const done = [] {
    auto* w = new WorkState;
    w->done = true;
    w->done_flag.store(true);
    return w;
  }();
  return std::shared_ptr<WorkState>(std::shared_ptr<WorkState>(), done);
}

MsgSig CommImpl::next_sig(CollOp op, size_t count, DType t, ReduceOp rop, int root,
                          int64_t explicit_seq) {
  MsgSig sig;
  sig.seq = explicit_seq >= 0 ? uint64_t(explicit_seq) : ++seq_;
  sig.op = op;
  sig.count = count;
  sig.dtype = t;
  sig.rop = rop;
  sig.root = root;
  return sig;
}

bool CommImpl::inline_begin() {
  // Without a worker thread nothing else touches the queue (a communicator
  // is used by one thread at a time), so no lock is needed.
  if (!worker_started_.load(std::memory_order_acquire)) return true;
  std::lock_guard<std::mutex> l(qmu_);
  if (!queue_.empty() || worker_busy_) return false;
  inline_busy_ = true;
  return true;
}

void CommImpl::run_inline(const MsgSig& sig, const std::string& algo, AlgoRef fn, uint64_t id) {
  auto release = [&] {
    if (!worker_started_.load(std::memory_order_acquire)) return;
    {
      std::lock_guard<std::mutex> l(qmu_);
      inline_busy_ = false;
    }
    qcv_.notify_all();
  };
  try {
    execute(sig, algo, fn, id);
  } catch (...) {
    release();
    throw;
  }
  release();
}

Work CommImpl::launch_queued(const MsgSig& sig, const std::string& algo, AlgoFn fn, uint64_t id,
                             bool async) {
  auto w = std::make_shared<WorkState>();
  w->timeout = timeout_;
  w->owner = this;
  w->run = [this, sig, algo = std::string(algo), fn = std::move(fn), id] {
    execute(sig, algo, AlgoRef(fn), id);
  };
  if (async) enqueue(w);
  else run_blocking(w);
  return Work(w);
}

void CommImpl::execute(const MsgSig& sig, const std::string& algo, AlgoRef fn, uint64_t fr_id) {
  if (broken_.load(std::memory_order_acquire)) {
    fr_.finish(fr_id, false);
    throw broken_error(describe_call(sig, algo));
  }
  fr_.start(fr_id, algo);
  struct Call {
    const MsgSig& sig;
    const std::string& algo;
    std::chrono::milliseconds timeout;
  } call{sig, algo, timeout_};
  const Call* cp = &call;  // one pointer: fits std::function's inline storage
  Context ctx(*tp_, rank_, size_, sig, uint64_t(timeout_.count()) * 1000000ull,
              [cp] {
                return describe_call(cp->sig, cp->algo) + " after " +
                       std::to_string(cp->timeout.count() / 1000.0).substr(0, 6) + " s";
              },
              pool_);
  ctx.set_ring(&ring_);
  ctx.set_stall_watch(desync_.get());
  try {
    fn(ctx, algo);
    fr_.finish(fr_id, true);
    desync_->done(sig);
  } catch (const Error& e0) {
    fr_.finish(fr_id, false);
    const Error e = forwarded(e0);
    std::string msg = failure_text(describe_call(sig, algo), e.what());
    if (e.code() != Errc::kInvalidArgument) set_broken(e.code(), msg);
    throw Error(e.code(), msg);
  }
}

std::string CommImpl::failure_text(const std::string& call, const std::string& what) const {
  const std::string self = who() + ": ";
  return what.rfind(self, 0) == 0 ? what : self + call + ": " + what;
}

Error CommImpl::forwarded(const Error& e) {
  if (e.code() != Errc::kPeerDied) return e;
  auto first = desync_->first_failure();
  if (!first) return e;  // nobody failed first: the peer really went away
  return Desync::forward(*first);
}

Error CommImpl::broken_error(const std::string& what) {
  std::lock_guard<std::mutex> l(broken_mu_);
  return Error(broken_code_, who() + ": " + what +
                                 " not started: the communicator failed earlier: " + broken_msg_);
}

bool CommImpl::mark_broken(Errc code, const std::string& msg, bool keep_first) {
  std::lock_guard<std::mutex> l(broken_mu_);
  if (keep_first && broken_.load(std::memory_order_acquire)) return false;
  broken_code_ = code;
  broken_msg_ = msg;
  broken_.store(true, std::memory_order_release);
  return true;
}

void CommImpl::set_broken(Errc code, const std::string& msg) {
  mark_broken(code, msg, false);
  // Before the peers are told: they read it to learn the first failure.
  desync_->record_failure(code, tp_->describe_peer(rank_), msg);
  // Peers waiting on this rank learn now, not at their deadline. Failing
  // because a peer gave up, pass on that peer's reason (the first failure),
  // not a message that wraps it once more per rank it went through.
  std::string first = tp_->peer_abort_reason();
  if (first.empty()) first = msg;
  tp_->abort(first);
  std::string fr = fr_.dump("braid: flight recorder of " + who());
  std::fprintf(stderr, "braid: %s\n%s", msg.c_str(), fr.c_str());
  std::lock_guard<std::mutex> l(g_registry_mu);
  for (CommImpl* m : registry())
    if (m != this && m->family_ == family_) m->abandon(code, first);
}

void CommImpl::abandon(Errc code, const std::string& why) {
  // The peers get the first failure itself, to pass on unwrapped.
  if (mark_broken(code, "its process gave it up after another communicator failed: " + why, true)) {
    desync_->record_failure(code, tp_->describe_peer(rank_), why);
    tp_->abort(why);
  }
}

void CommImpl::complete(WorkState& w, std::exception_ptr err) {
  std::lock_guard<std::mutex> l(w.mu);
  w.error = err;
  w.done = true;
  w.done_flag.store(true, std::memory_order_release);
  w.cv.notify_all();
}

void CommImpl::run_blocking(const std::shared_ptr<WorkState>& w) {
  {
    std::unique_lock<std::mutex> l(qmu_);
    if (!queue_.empty() || worker_busy_) {
      queue_.push_back(w);
      l.unlock();
      qcv_.notify_all();
      Work(w).wait();
      return;
    }
    inline_busy_ = true;
  }
  std::exception_ptr err;
  if (w->p2p) {
    run_p2p_group({w});  // completes w, errors included
  } else {
    try {
      w->run();
    } catch (...) {
      err = std::current_exception();
    }
  }
  {
    std::lock_guard<std::mutex> l(qmu_);
    inline_busy_ = false;
  }
  qcv_.notify_all();
  if (w->p2p) {
    Work(w).wait();  // done: rethrows its error
    return;
  }
  complete(*w, err);
  if (err) std::rethrow_exception(err);
}

void CommImpl::enqueue(const std::shared_ptr<WorkState>& w) {
  {
    std::lock_guard<std::mutex> l(qmu_);
    queue_.push_back(w);
    if (!worker_.joinable()) {
      worker_ = std::thread([this] { worker_loop(); });
      worker_started_.store(true, std::memory_order_release);
    }
  }
  qcv_.notify_all();
}

void CommImpl::run_front(std::unique_lock<std::mutex>& l, bool& busy) {
  if (queue_.front()->p2p) {
    busy = true;  // keeps the other runner off the queue meanwhile
    std::vector<std::shared_ptr<WorkState>> ws{std::move(queue_.front())};
    queue_.pop_front();
    l.unlock();
    run_p2p_group(std::move(ws));  // completes each, errors included
    l.lock();
    busy = false;
    qcv_.notify_all();
    return;
  }
  auto w = queue_.front();
  queue_.pop_front();
  busy = true;  // keeps the other runner off the queue meanwhile
  l.unlock();
  std::exception_ptr err;
  try {
    w->run();
  } catch (...) {
    err = std::current_exception();  // reported through w's own Work
  }
  complete(*w, err);
  l.lock();
  busy = false;
  qcv_.notify_all();
}

void CommImpl::run_queued_until(WorkState& w) {
  std::unique_lock<std::mutex> l(qmu_);
  while (!w.done_flag.load(std::memory_order_acquire)) {
    if (worker_busy_ || inline_busy_ || queue_.empty()) return;
    run_front(l, inline_busy_);
  }
}

void CommImpl::worker_loop() {
  std::unique_lock<std::mutex> l(qmu_);
  for (;;) {
    qcv_.wait(l, [&] { return stop_ || (!queue_.empty() && !inline_busy_); });
    if (queue_.empty() && stop_) return;
    if (queue_.empty() || inline_busy_) continue;
    run_front(l, worker_busy_);
  }
}

Work CommImpl::launch_p2p(bool sending, const void* src, void* dst, size_t count, DType t,
                          int peer, int tag, size_t bytes, bool async, CollOp op) {
  // The application's sends and receives go to the twin; the probe's stay
  // here (they run while this communicator is being built, before the twin).
  if (p2p_ && op == CollOp::kSend)
    return p2p_->launch_p2p(sending, src, dst, count, t, peer, tag, bytes, async, op);
  // A receive carries the sender's signature (kSend) so the two compare equal.
  MsgSig sig = next_sig(op, count, t, ReduceOp::kSum, tag,
                        int64_t(next_p2p_seq(peer, sending)));
  const std::string& algo = choose(CollOp::kSend, bytes, t);
  // A blocking call with nothing queued runs alone, right here (nothing
  // can join it: a communicator is used by one thread at a time).
  if (!async && inline_begin()) {
    auto fn = [=](Context& c, const std::string&) {
      c.wait(sending ? c.send(peer, src, bytes) : c.recv(peer, dst, bytes));
    };
    run_inline(sig, algo, AlgoRef(fn), fr_.record(sig));
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
  p.algo = algo;
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
        fr_.start(p.fr_id, p.algo);
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

std::unique_ptr<CommImpl> CommImpl::split(int color, int key) {
  // Everyone learns everyone's (color, key) through an all-gather on this
  // communicator; the split's store keys are unique per (sequence, color).
  int32_t mine[2] = {color, key};
  std::vector<int32_t> all(size_t(size_) * 2);
  launch(CollOp::kAllGather, 2, DType::kI32, ReduceOp::kSum, -1, 8 * size_t(size_), false,
         [&](Context& c, const std::string&) {
           algo::all_gather_direct(c, mine, all.data(), 2);
         });
  uint64_t split_seq = seq_;
  if (color < 0) return nullptr;
  std::vector<std::pair<int, int>> members;  // (key, old rank)
  for (int r = 0; r < size_; ++r)
    if (all[2 * r] == color) members.emplace_back(all[2 * r + 1], r);
  std::sort(members.begin(), members.end());
  int new_rank = -1;
  for (size_t i = 0; i < members.size(); ++i)
    if (members[i].second == rank_) new_rank = int(i);
  std::string prefix =
      prefix_ + "s" + std::to_string(split_seq) + "c" + std::to_string(color) + "/";
  CommOptions o = opt_;
  o.timeout = timeout_;
  return std::make_unique<CommImpl>(new_rank, int(members.size()), store_, prefix, o, nullptr,
                                    Role::kUser, this);
}

std::string CommImpl::who() const { return rank_name(rank_, world_rank_); }

std::string CommImpl::flight_record() const {
  std::string s = fr_.dump("braid: flight recorder of " + who() + " (size " +
                           std::to_string(size_) + ", comm '" + prefix_ + "')");
  return p2p_ ? s + p2p_->flight_record() : s;
}

namespace {
int g_sig_pipe[2] = {-1, -1};
void on_sigusr1(int) {
  char c = 1;
  (void)!::write(g_sig_pipe[1], &c, 1);
}
}  // namespace

}  // namespace braid::comm

namespace braid {

void install_flight_recorder_signal() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (::pipe(comm::g_sig_pipe) != 0) throw_errno("flight recorder: pipe");
    std::thread([] {
      char c;
      while (::read(comm::g_sig_pipe[0], &c, 1) == 1) {
        std::lock_guard<std::mutex> l(comm::g_registry_mu);
        for (auto* ci : comm::registry()) std::fputs(ci->flight_record().c_str(), stderr);
      }
    }).detach();
    struct sigaction sa {};
    sa.sa_handler = comm::on_sigusr1;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, nullptr);
  });
}

}  // namespace braid
