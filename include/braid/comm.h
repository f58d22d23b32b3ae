// Communicator: a group of ranks and every collective over them.
//
// Semantics follow MPI / NCCL / Gloo:
//  * counts are in elements of `dtype`; every rank passes the same count,
//    dtype, op and root. A mismatch raises Error(kMismatch) naming both
//    sides instead of hanging or corrupting data, on every rank within about
//    a second. Where the ranks disagree on who sends to whom (a rooted
//    collective's root), each may believe it only sends, or only receives,
//    so no message shows the disagreement: a rank whose call then waits
//    finds it through the store (its call and its peers' are compared after
//    100 ms of waiting) and raises it in that call; a call that completes
//    because its messages fit the peers' buffers returns, and the mismatch
//    is raised at the latest by the rank's next call on the communicator.
//    Checking every rooted call at once would cost every call a message;
//  * in-place is allowed wherever send == recv: all_reduce, reduce,
//    broadcast, all_to_all and all_to_all_v (MPI_IN_PLACE: each block is
//    sent before it is overwritten; this costs one local copy of the input);
//    all_gather with send == recv + rank*count; reduce_scatter with
//    recv == send + rank*count; gather with the root's send == recv +
//    root*count, scatter with the root's recv == send + root*count (its own
//    block stays where it is);
//  * argument errors (null buffers, bad roots or peers, counts that
//    overflow, unknown dtypes or ops) raise Error(kInvalidArgument) at the
//    call, also for the _async forms, before anything is queued, and leave
//    the communicator usable; a reduce op a dtype does not define (bitwise
//    ops on floats) raises Error(kNotSupported). send/recv to this rank
//    itself is refused (kInvalidArgument): copy instead;
//  * threads: the calls of one communicator must be issued by one thread at
//    a time (their issue order is the order every rank must match); Work
//    handles may be waited on from any thread, and different communicators
//    (a split and its parent) may be used from different threads at once;
//  * send/recv travel apart from the collectives, on the communicator's own
//    point-to-point connections and queue (as MPI keeps them in a separate
//    context): a receive posted before a collective and matched after it,
//    or a send whose receive comes after a collective, holds nothing up.
//    Messages between two ranks are matched in posting order;
//  * every blocking call has a deadline (CommOptions::timeout, default
//    BRAID_TIMEOUT or 300 s) and throws Error(kTimeout) naming this rank, the
//    operation, its sequence number, the peers not heard from and bytes done;
//  * a peer that dies fails the pending operation with Error(kPeerDied)
//    within a few seconds;
//  * after any failure other than bad arguments (timeout, mismatch, dead
//    peer) the communicator is broken: later calls fail at once with the
//    first error. Its peers are told: their pending and later operations
//    fail at once (over shared memory, or a TCP connection they are
//    reading; else at their next 200 ms look at the store) instead of
//    waiting out their deadline, with the first failure's code (kMismatch,
//    kTimeout; kPeerDied only where a process really died) and a message
//    that names this rank and its own call, then "stopped, because rank R
//    (pid P on host H) failed first:" and that rank's own message.
//    So are the other communicators of this process that share its root
//    (the one it was split from, its splits): one failed group stops the
//    job's other groups too, as PyTorch's error handling does by ending the
//    process.
//
// Every collective has an _async twin returning a Work handle. Async work runs
// in issue order on the communicator's background thread; blocking calls run
// on the calling thread when nothing is queued. Buffers of async work must
// stay valid until the Work completes.
//
// Algorithms: each collective has a table of them (comm::algorithms lists
// the names). A cost model picks, per call, the cheapest that can run; its
// cost (α latency, β seconds per byte, γ seconds per byte reduced, n ranks,
// N bytes) is given, with the schedule, at the top of the algorithm's file
// in src/comm/algo/, next to the code that computes it. BRAID_ALGO and
// set_algorithm force one (see set_algorithm for the rules).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "braid/dtype.h"
#include "braid/error.h"
#include "braid/store.h"

namespace braid {

namespace comm { class CommImpl; struct WorkState; struct SharedRegion; }

// Handle of an asynchronous operation.
class Work {
 public:
  Work() = default;
  explicit Work(std::shared_ptr<comm::WorkState> s) : s_(std::move(s)) {}
  // Blocks until done; rethrows the operation's error. A default deadline
  // (the communicator's timeout) applies.
  void wait();
  // Blocks up to `timeout`; returns false if not yet done (the operation keeps
  // running). Rethrows the operation's error if it failed.
  bool wait_for(std::chrono::milliseconds timeout);
  // Non-blocking: true when complete (rethrows its error if it failed).
  bool test();
  bool valid() const { return s_ != nullptr; }
  // A receive from any source (Communicator::recv_any_async) that has
  // completed: the rank it received from. -1 before then, and for every
  // other operation.
  int source() const;

 private:
  std::shared_ptr<comm::WorkState> s_;
};

// Memory from Communicator::alloc_shared, zero-filled. Copies share the
// allocation; the last one frees it.
class SharedBuffer {
 public:
  SharedBuffer() = default;
  void* data() const;
  size_t bytes() const;
  template <class T>
  T* as() const { return static_cast<T*>(data()); }
  // True when every rank of the communicator maps this memory, so that
  // collectives on it take the shared path. False where that is not
  // possible (a peer on another host or reached over TCP, a single rank):
  // then it is ordinary private memory and collectives run as usual.
  bool shared() const;

 private:
  friend class Communicator;
  std::shared_ptr<comm::SharedRegion> r_;
};

struct CommOptions {
  std::chrono::milliseconds timeout{0};  // 0: BRAID_TIMEOUT or 300 s
  std::string transport;                 // "", "auto", "shm", "tcp" (BRAID_TRANSPORT)
  std::string secret;                    // job secret ("" : BRAID_SECRET)
};

class Communicator {
 public:
  // From the environment set by `braid run`, torchrun, mpirun or srun.
  static std::shared_ptr<Communicator> from_env(const CommOptions& opt = {});
  // Explicit rank, size and store (all ranks use the same store).
  static std::shared_ptr<Communicator> create(int rank, int size, std::shared_ptr<Store> store,
                                              const CommOptions& opt = {});
  ~Communicator();

  int rank() const;
  int size() const;
  // Ranks of this communicator on this rank's host (BRAID_HOSTNAME or the
  // host name), this one included.
  int host_size() const;

  // true: from now on a collective's _async form runs on the calling thread
  // to its end, as the blocking form does, and returns a finished Work
  // (send/recv stay asynchronous). For callers whose computation already
  // takes every core of the host, where braid's background thread could
  // only take turns with it (python/braid_torch/threads.h). Set it from
  // the thread that issues the operations; split() does not pass it on.
  void set_async_inline(bool on);

  // Collective over this communicator: ranks with the same color form a new
  // communicator ordered by (key, old rank). color < 0 returns nullptr for
  // that rank (MPI_UNDEFINED). The result runs independently of its parent.
  std::shared_ptr<Communicator> split(int color, int key);

  // Collective: every rank calls it (each with its own size, usually the
  // same), in the same order as its other collectives. When all ranks share
  // this host and the shared-memory transport, each rank's memory is mapped
  // by every peer, and collectives on buffers inside it (each rank passing
  // memory from the same alloc_shared call, at any offset) work straight
  // out of the peers' buffers, with no staging copies (algorithm "shared",
  // src/comm/algo/shared.cc; BRAID_ALGO overrides it): all_reduce (recv
  // there) reads and writes the buffer once per rank, about half the
  // memory traffic of the ring; all_gather (recv there) copies each byte
  // once; reduce_scatter (send there) reads each input once.
  // Below kSharedMinBytes the usual algorithms run (their one exchange beats
  // the shared path's two rounds of small messages: 2 ranks, 512 B: 1.04 vs
  // 1.07 µs; 1 KiB: 1.14 vs 1.07 µs).
  // A rank that passes such memory while a peer does not gets
  // Error(kMismatch). Throws Error(kIo) if no memory can be had at all.
  SharedBuffer alloc_shared(size_t bytes);
  static constexpr size_t kSharedMinBytes = 1024;

  void broadcast(void* buf, size_t count, DType t, int root);
  void reduce(const void* send, void* recv, size_t count, DType t, ReduceOp op, int root);
  void all_reduce(const void* send, void* recv, size_t count, DType t, ReduceOp op);
  void all_gather(const void* send, void* recv, size_t count, DType t);
  void reduce_scatter(const void* send, void* recv, size_t count, DType t, ReduceOp op);
  void gather(const void* send, void* recv, size_t count, DType t, int root);
  void scatter(const void* send, void* recv, size_t count, DType t, int root);
  void all_to_all(const void* send, void* recv, size_t count, DType t);
  // Variable counts: counts and displacements in elements, one per rank.
  void all_to_all_v(const void* send, const std::vector<size_t>& send_counts,
                    const std::vector<size_t>& send_displs, void* recv,
                    const std::vector<size_t>& recv_counts,
                    const std::vector<size_t>& recv_displs, DType t);
  void barrier();
  // Point to point. Messages between two ranks are matched in posting order;
  // the tags must agree (a different tag raises Error(kMismatch)). They
  // never wait behind collectives nor hold them up (see the top). peer ==
  // rank() is refused.
  void send(const void* buf, size_t count, DType t, int peer, uint32_t tag = 0);
  void recv(void* buf, size_t count, DType t, int peer, uint32_t tag = 0);
  // Receive from any source (MPI_ANY_SOURCE): takes the first message with
  // `tag` to arrive from any rank and returns that rank (recv_any_async's
  // Work::source() gives it once done). Matched in posting order, as MPI
  // does: a rank is a candidate only once the receives from it posted
  // earlier have their messages, and later receives (any rank's) wait
  // until this one has its sender; sends go on meanwhile. A message from
  // the chosen rank with another count or dtype raises Error(kMismatch);
  // one with another tag is left for a later receive. No message within
  // the deadline: Error(kTimeout) showing each rank's next message.
  int recv_any(void* buf, size_t count, DType t, uint32_t tag = 0);

  Work broadcast_async(void* buf, size_t count, DType t, int root);
  Work reduce_async(const void* send, void* recv, size_t count, DType t, ReduceOp op, int root);
  Work all_reduce_async(const void* send, void* recv, size_t count, DType t, ReduceOp op);
  Work all_gather_async(const void* send, void* recv, size_t count, DType t);
  Work reduce_scatter_async(const void* send, void* recv, size_t count, DType t, ReduceOp op);
  Work gather_async(const void* send, void* recv, size_t count, DType t, int root);
  Work scatter_async(const void* send, void* recv, size_t count, DType t, int root);
  Work all_to_all_async(const void* send, void* recv, size_t count, DType t);
  Work barrier_async();
  Work send_async(const void* buf, size_t count, DType t, int peer, uint32_t tag = 0);
  Work recv_async(void* buf, size_t count, DType t, int peer, uint32_t tag = 0);
  Work recv_any_async(void* buf, size_t count, DType t, uint32_t tag = 0);

  // Forces the algorithm for one collective ("auto": the cost model picks
  // again); the same as BRAID_ALGO=op:algo[,op:algo]. The names are
  // comm::algorithms(collective) (`braid bench --list-algos` prints them,
  // with the README's algorithm table); any other throws
  // Error(kInvalidArgument) listing them. A forced algorithm that cannot
  // run for a call (e.g. "hier" without ranks on several hosts, "chain"
  // with a peer over TCP, "shared" on a buffer outside alloc_shared memory)
  // makes that call throw Error(kInvalidArgument) naming the algorithm, the
  // collective and what it needs, before anything is sent; no other
  // algorithm runs in its place. Under BRAID_DETERMINISTIC=1 the reductions
  // keep rank-order folding (direct, or oneshot for all_reduce) whatever is
  // set here, and say so once on stderr.
  void set_algorithm(const std::string& collective, const std::string& algo);
  // The algorithms of `collective` that can run on this communicator for
  // buffers in private memory ("hier" only with a host hierarchy, "chain"
  // only when every peer is on shared memory), in the order comm::algorithms
  // gives.
  std::vector<std::string> algorithms(const std::string& collective) const;
  // The algorithm the cost model would pick for this collective and size.
  std::string chosen_algorithm(const std::string& collective, size_t bytes) const;
  // The cost model's seconds for `algo` running `collective` on `bytes`
  // here (infinity where it cannot run); throws Error(kInvalidArgument)
  // for an unknown collective.
  double predicted_seconds(const std::string& collective, const std::string& algo,
                           size_t bytes) const;
  // Text of the flight recorder: the last operations of this communicator.
  std::string flight_record() const;
  // The algorithm that ran the newest operation of this communicator (read
  // once it has completed), e.g. "shared" when the buffers lie in
  // alloc_shared memory.
  std::string last_algorithm() const;
  // The transport used to reach `peer`: "self", "shm" or "tcp".
  std::string transport_to(int peer) const;
  // The cost model's class of that link (tuning.h): "self", "shm", "tcp"
  // (TCP to a rank on this host) or "net" (TCP to a rank on another host).
  std::string link_class_to(int peer) const;
  // The host `peer` runs on (BRAID_HOSTNAME or its host name).
  std::string host_of(int peer) const;

  comm::CommImpl& impl() { return *impl_; }

 private:
  explicit Communicator(std::unique_ptr<comm::CommImpl> impl);
  std::unique_ptr<comm::CommImpl> impl_;
};

// Dumps every live communicator's flight recorder to stderr on SIGUSR1.
void install_flight_recorder_signal();

namespace comm {
// Every algorithm of `collective` ("all_reduce", "broadcast", "reduce",
// "all_gather", "reduce_scatter", "gather", "scatter", "all_to_all",
// "all_to_all_v", "barrier"), in the cost model's tie-break order (of two
// with the same predicted time, the first wins): the names BRAID_ALGO and
// Communicator::set_algorithm accept. Each is described, with its schedule
// and α-β cost, at the top of its file in src/comm/algo/. Throws
// Error(kInvalidArgument) for an unknown collective.
std::vector<std::string> algorithms(const std::string& collective);
// Those collectives, in that order (the README's algorithm table and
// `braid bench --list-algos` list them so).
std::vector<std::string> collectives();
}  // namespace comm

}  // namespace braid
