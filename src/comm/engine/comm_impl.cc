// CommImpl: construction and its family, failures and their reach, split,
// the flight recorder. The executor (inline runs, the queue and its
// worker): comm_executor.cc; set-up pieces: comm_setup.cc; send / recv:
// comm_p2p.cc.
#include "comm/engine/comm_impl.h"

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
#include "comm/setup/probe.h"

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

}  // namespace

CommImpl::CommImpl(int rank, int size, std::shared_ptr<Store> store, std::string prefix,
                   const CommOptions& opt, Role role, const CommImpl* parent,
                   std::shared_ptr<TcpStoreServer> store_host)
    : rank_(rank), size_(size), world_rank_(parent ? parent->world_rank_ : rank),
      family_(parent ? parent->family_ : next_family()),
      store_host_(parent ? parent->store_host_ : std::move(store_host)), store_(std::move(store)),
      prefix_(std::move(prefix)), opt_(opt) {
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
    p2p_ = std::make_unique<CommImpl>(rank_, size_, store_, prefix_ + "p2p/", opt_,
                                      Role::kPointToPoint, this);
  host_ring_.peers_on_shm = all_shm && size_ > 1;
  std::lock_guard<std::mutex> l(g_registry_mu);
  registry().insert(this);
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

const algo::Algorithm& CommImpl::choose(CollOp op, size_t bytes, DType t, bool shared_span) {
  LastChoice& lc = last_choice_;
  if (lc.algo && lc.op == op && lc.bytes == bytes && lc.t == t && lc.shared_span == shared_span)
    return *lc.algo;
  const algo::Algorithm& a = selector_->select(op, bytes, t, shared_span);
  lc = LastChoice{op, bytes, t, shared_span, &a};
  return a;
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

std::unique_ptr<CommImpl> CommImpl::split(int color, int key) {
  // Everyone learns everyone's (color, key) through an all-gather on this
  // communicator; the split's store keys are unique per (sequence, color).
  int32_t mine[2] = {color, key};
  std::vector<int32_t> all(size_t(size_) * 2);
  algo::Call gather;
  gather.send = mine;
  gather.recv = all.data();
  gather.count = 2;
  launch(algo::get(CollOp::kAllGather, algo::AlgoId::kDirect), 2, DType::kI32, ReduceOp::kSum,
         -1, false, gather);
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
  return std::make_unique<CommImpl>(new_rank, int(members.size()), store_, prefix, o,
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
