// CommImpl: the machinery behind braid::Communicator.
//
// Owns the transport, the sequence counter, the algorithm selector, the
// flight recorder and the executor. Operations run in issue order: blocking
// calls execute on the caller's thread when nothing is queued; async calls go
// to a background thread (started on first use) that runs them one by one.
// Consecutive point-to-point operations are the exception: they run
// together (all posted, then progressed as one group), so the MPI idiom
// "irecv from a peer, then send to it" completes on both ranks instead of
// each rank's receive waiting for a send queued behind it.
// After any failure the communicator is broken (like an aborted NCCL
// communicator): later calls fail at once with the original reason.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "braid/comm.h"
#include "comm/algo/context.h"
#include "comm/algo/registry.h"
#include "comm/engine/flight_recorder.h"
#include "comm/algo/select.h"
#include "comm/algo/host_ring.h"
#include "comm/engine/desync.h"
#include "comm/transport/shm/shared_memory.h"
#include "comm/transport/transport.h"

namespace braid::comm {

struct WorkState {
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<bool> done_flag{false};  // set with `done`; read without the lock
  bool done = false;
  std::exception_ptr error;
  // A receive from any source: the sender's rank, set before it completes.
  int source = -1;
  std::function<void()> run;
  std::chrono::milliseconds timeout{0};
  // The communicator that queued it (alive while it is not done: ~CommImpl
  // drains the queue), so a waiter can run it itself (CommImpl::run_queued_until).
  CommImpl* owner = nullptr;
  // Set for send / recv: what CommImpl::run_p2p_group posts.
  struct P2p {
    Request::Kind kind = Request::Kind::kSend;
    int peer = -1;     // -1: a receive from any source, until its sender is chosen
    bool any = false;  // a receive from any source
    const void* src = nullptr;
    void* dst = nullptr;
    MsgSig sig;  // sig.bytes = payload; a receive's seq is set when it is posted
    uint64_t fr_id = 0;
    const algo::Algorithm* algo = nullptr;
  };
  std::unique_ptr<P2p> p2p;
};

class CommImpl {
 public:
  // What a communicator is for. kUser: one the application holds (made by
  // create, from_env or split); it builds the host hierarchy when ranks
  // span hosts, and a kPointToPoint twin. kHierarchy: the hierarchy's own
  // sub-communicators. kPointToPoint: a kUser communicator's twin that
  // carries its send / recv, on a transport and queue of its own, so that
  // point-to-point and collective traffic never wait behind each other
  // (MPI keeps them apart the same way).
  enum class Role { kUser, kHierarchy, kPointToPoint };

  // Collective over all `size` ranks sharing `store`: builds the transport.
  // `parent`: the communicator a sub-communicator comes from; it takes the
  // parent's tuning text (without one the ranks take rank 0's tuning file,
  // and probe the links it has no figures for, comm/setup/probe.h), its world
  // rank, its family and its store host.
  // `store_host`: the store server this process runs for the job (from_env
  // on the rank that hosts the store), or null. Every rank's communicators
  // reach the store through it, so each communicator on that store holds
  // it — a sub-communicator its parent's — and the server lives while any
  // of them does, whichever the application drops first.
  CommImpl(int rank, int size, std::shared_ptr<Store> store, std::string prefix,
           const CommOptions& opt, Role role = Role::kUser, const CommImpl* parent = nullptr,
           std::shared_ptr<TcpStoreServer> store_host = nullptr);
  ~CommImpl();

  int rank() const { return rank_; }
  // "rank R", or "rank R (world rank W)" in a sub-communicator.
  std::string who() const;
  int size() const { return size_; }
  void set_async_inline(bool on) { async_inline_ = on; }
  int host_size() const {
    return int(std::count(hosts_.begin(), hosts_.end(), hosts_[size_t(rank_)]));
  }

  // Issues one operation: the algorithm the selector chooses for it, run
  // with `call`'s arguments. `model_bytes` is the size the cost model
  // prices; a call.span (every buffer lies in alloc_shared memory) makes
  // "shared" the choice unless an override names another.
  // async=false runs it to completion (rethrowing its error). A forced
  // algorithm that cannot run throws Error(kInvalidArgument) before
  // anything is issued.
  Work launch(CollOp op, size_t count, DType t, ReduceOp rop, int root, size_t model_bytes,
              bool async, const algo::Call& call) {
    const algo::Algorithm& a = choose(op, model_bytes, t, bool(call.span));
    return launch(a, count, t, rop, root, async, call);
  }
  // The same with the algorithm given, not chosen: a step of another
  // algorithm (the hierarchy's), or a communicator's own set-up.
  Work launch(const algo::Algorithm& a, size_t count, DType t, ReduceOp rop, int root,
              bool async, const algo::Call& call) {
    MsgSig sig = next_sig(a.op, count, t, rop, root, -1);
    uint64_t id = fr_.record(sig);
    // Fast path: a blocking call with nothing queued runs right here, with
    // no WorkState, no std::function and no thread hand-off. So does an
    // _async one when the caller asked for it (set_async_inline), its
    // error kept in the Work it returns.
    if (async && async_inline_) return run_here(sig, a, call, id);
    if (!async && inline_begin()) {
      run_inline(sig, a, call, id);
      return Work(completed_work());
    }
    return launch_queued(sig, a, call, id, async);
  }
  // send (from src) or recv (into dst) of `bytes` with `peer`. `op`:
  // kSend, or kProbe for the cost-model probe's messages (probe_links), so
  // that errors and the flight recorder name them.
  Work launch_p2p(bool sending, const void* src, void* dst, size_t count, DType t, int peer, int tag,
                  size_t bytes, bool async, CollOp op = CollOp::kSend);
  // recv (into dst) of `bytes` with `tag` from whichever rank sends one
  // first (Communicator::recv_any_async).
  Work launch_recv_any(void* dst, size_t count, DType t, int tag, size_t bytes, bool async);
  // Queues (async) or runs (blocking) the send / recv `p` with `sig`.
  Work queue_p2p(WorkState::P2p p, const MsgSig& sig, const algo::Algorithm& a, bool async);

  // Called by Work::wait: while the worker thread is idle, runs the queued
  // operations, oldest first, on the calling thread until `w` is done.
  // Returns when `w` is done or the worker is running one (then the caller
  // blocks on `w` as usual). A rank about to block anyway runs its own
  // collective at once instead of handing it to a thread that may not get
  // a core before then (ranks ≥ cores, or real-time priority).
  void run_queued_until(WorkState& w);

  std::unique_ptr<CommImpl> split(int color, int key);

  // Regions from Communicator::alloc_shared, for collectives to recognise.
  SharedRegistry& shared_registry() { return shared_; }
  // The region holding a collective's `bytes` at `buf` when the shared
  // algorithm applies to it (several ranks, at least kSharedMinBytes).
  SharedSpan shared_span(const void* buf, size_t bytes) {
    if (size_ < 2 || bytes < Communicator::kSharedMinBytes) return {};
    return shared_.find(buf, bytes);
  }

  Selector& selector() {
    last_choice_ = LastChoice{};  // overrides may change
    return *selector_;
  }
  const Selector& selector() const { return *selector_; }
  std::string flight_record() const;
  std::string last_algorithm() const { return fr_.last_algo(); }
  std::string transport_to(int peer) const { return tp_->kind_to(peer); }
  // The cost model's class of the link to `peer` (tuning.h's CostParams):
  // "self", "shm", "tcp" (to a rank on this host) or "net" (another host).
  std::string link_class_to(int peer) const;
  const std::string& host_of(int peer) const { return hosts_.at(size_t(peer)); }
  std::chrono::milliseconds timeout() const { return timeout_; }
  size_t chunk_bytes() const { return chunk_bytes_; }
  // Ring order used by ring algorithms (ranks of one host contiguous, or
  // from BRAID_TOPOLOGY's bandwidth matrix).
  const std::vector<int>& ring() const { return ring_; }
  // Host hierarchy: set when ranks span several hosts and some host has
  // several ranks. leaders() is null on ranks that are not host leaders.
  CommImpl* local() { return local_.get(); }
  CommImpl* leaders() { return leaders_.get(); }
  bool hierarchical() const { return local_ != nullptr; }
  // The chain all-reduce's shared ring (set up by its first call).
  algo::HostRing& host_ring() { return host_ring_; }

 private:
  // Hosts and ring order; then, once the selector exists, the per-host
  // sub-communicators of the hierarchical all-reduce.
  void build_topology(Store& pstore, bool with_topology_file);
  void build_hierarchy();
  // Rank 0's tuning file's text, published through the store (collective).
  std::string agree_cost_text(Store& pstore) const;
  // The selector from cost_text_ (and BRAID_ALGO).
  void make_selector(int nhosts, int max_local, bool any_tcp, bool all_shm, int cores);
  // Probes the links probe_plan names and updates cost_text_ (collective:
  // rank 0 decides and caches, the others follow through the store).
  // Returns whether cost_text_ changed.
  bool probe_links(Store& pstore, int max_local, int cores);
  void execute(const MsgSig& sig, const algo::Algorithm& a, const algo::Call& call,
               uint64_t fr_id);
  MsgSig next_sig(CollOp op, size_t count, DType t, ReduceOp rop, int root, int64_t explicit_seq);
  bool inline_begin();
  void run_inline(const MsgSig& sig, const algo::Algorithm& a, const algo::Call& call,
                  uint64_t id);
  Work launch_queued(const MsgSig& sig, const algo::Algorithm& a, const algo::Call& call,
                     uint64_t id, bool async);
  // An _async call run on the calling thread to its end (behind what is
  // queued): a finished Work, holding the error if it failed.
  Work run_here(const MsgSig& sig, const algo::Algorithm& a, const algo::Call& call, uint64_t id);
  static std::shared_ptr<WorkState> completed_work();
  const algo::Algorithm& choose(CollOp op, size_t bytes, DType t, bool shared_span = false);
  void run_blocking(const std::shared_ptr<WorkState>& w);
  void enqueue(const std::shared_ptr<WorkState>& w);
  void worker_loop();
  // With qmu_ held by `l`: runs the oldest queued operation with `busy`
  // (worker_busy_ or inline_busy_) raised and qmu_ released meanwhile.
  void run_front(std::unique_lock<std::mutex>& l, bool& busy);
  // Runs sends / recvs `ws` (taken off the queue, or a blocking one) and
  // every send / recv queued right behind them, also those queued while
  // they run, as one group: all posted, progressed together, each completed
  // (or failed) on its own. Called with qmu_ released and the runner's busy
  // flag raised.
  void run_p2p_group(std::vector<std::shared_ptr<WorkState>> ws);
  // "recv from rank 1 (seq 3, count 10 f32, tag 7)"
  std::string describe_p2p(const WorkState::P2p& p) const;
  // For a receive from any source (tag `tag`) still without a sender: each
  // other rank's next message, or why it was not looked at. open_recvs:
  // receives posted and open, per peer.
  std::string any_source_view(const std::vector<int>& open_recvs, int tag);
  uint64_t next_p2p_seq(int peer, bool sending);
  // Records the failure; with keep_first, only if none is recorded yet.
  // Returns whether it recorded this one.
  bool mark_broken(Errc code, const std::string& msg, bool keep_first);
  // Marks the communicator broken with `msg`, tells its peers (the
  // transport's abort), dumps the flight recorder, and abandons the rest of
  // the family.
  void set_broken(Errc code, const std::string& msg);
  // Another communicator of the family failed with `why`: this one is
  // broken too, and its peers are told. Called with the registry's lock held.
  void abandon(Errc code, const std::string& why);
  // Once broken: the error for operation `what`, which was not started.
  Error broken_error(const std::string& what);
  // `e`, or, when it says a peer abandoned the communicator after another
  // rank's failure, that first failure with its own code.
  Error forwarded(const Error& e);
  // The message of a failed operation: `what` when it already names this
  // rank, else prefixed with this rank and the call.
  std::string failure_text(const std::string& call, const std::string& what) const;
  static void complete(WorkState& w, std::exception_ptr err);

  int rank_, size_;
  int world_rank_;  // this rank in the top communicator (messages name both)
  // Shared by a communicator, its splits and the hierarchy's
  // sub-communicators. When one fails, the others are abandoned: a job
  // whose data-parallel group failed does not wait out the deadline in its
  // tensor-parallel group (PyTorch's error handling tears down the whole
  // process for the same reason).
  uint64_t family_;
  // Declared before everything that uses the store, so destroyed after it.
  std::shared_ptr<TcpStoreServer> store_host_;
  std::shared_ptr<Store> store_;
  std::string prefix_;
  CommOptions opt_;
  bool async_inline_ = false;  // Communicator::set_async_inline
  std::chrono::milliseconds timeout_;
  size_t chunk_bytes_;
  std::unique_ptr<Transport> tp_;
  std::unique_ptr<Selector> selector_;
  std::string cost_text_;  // the tuning text all ranks agreed on
  std::vector<std::string> hosts_;
  std::vector<int> ring_;
  std::unique_ptr<CommImpl> local_, leaders_;
  std::unique_ptr<CommImpl> p2p_;  // Role::kPointToPoint twin (kUser only)
  FlightRecorder fr_;
  ContextPool pool_;
  SharedRegistry shared_;
  algo::HostRing host_ring_;
  // The last selection, reused while calls repeat (op, size, dtype, span).
  struct LastChoice {
    CollOp op = CollOp::kProbe;
    size_t bytes = ~size_t(0);
    DType t = DType::kU8;
    bool shared_span = false;
    const algo::Algorithm* algo = nullptr;
  } last_choice_;
  uint64_t seq_ = 0;
  std::vector<uint64_t> p2p_send_seq_, p2p_recv_seq_;
  // Disagreements no header shows, and the first failure (through the store).
  std::unique_ptr<Desync> desync_;

  // Executor state.
  std::mutex qmu_;
  std::condition_variable qcv_;
  std::deque<std::shared_ptr<WorkState>> queue_;
  bool worker_busy_ = false, inline_busy_ = false, stop_ = false;
  std::thread worker_;
  std::atomic<bool> worker_started_{false};

  // Set once an operation failed.
  std::mutex broken_mu_;
  std::atomic<bool> broken_{false};
  Errc broken_code_ = Errc::kInternal;
  std::string broken_msg_;
};

}  // namespace braid::comm
