// braid::Communicator: argument checks and dispatch to the chosen algorithm.
#include <limits>

#include "braid/comm.h"

#include "braid/env.h"
#include "comm/algo/registry.h"
#include "comm/engine/comm_impl.h"
#include "comm/transport/shm/shared_memory.h"

namespace braid {

using comm::CollOp;
namespace algo = comm::algo;

// ---- Work -------------------------------------------------------------------

void Work::wait() {
  BRAID_CHECK_ARG(s_ != nullptr, "Work::wait on an empty handle");
  if (s_->done_flag.load(std::memory_order_acquire)) {
    if (s_->error) std::rethrow_exception(s_->error);
    return;
  }
  if (s_->owner != nullptr) s_->owner->run_queued_until(*s_);
  std::unique_lock<std::mutex> l(s_->mu);
  s_->cv.wait(l, [&] { return s_->done; });
  if (s_->error) std::rethrow_exception(s_->error);
}

bool Work::wait_for(std::chrono::milliseconds timeout) {
  BRAID_CHECK_ARG(s_ != nullptr, "Work::wait_for on an empty handle");
  std::unique_lock<std::mutex> l(s_->mu);
  if (!s_->cv.wait_for(l, timeout, [&] { return s_->done; })) return false;
  if (s_->error) std::rethrow_exception(s_->error);
  return true;
}

int Work::source() const {
  if (s_ == nullptr || !s_->done_flag.load(std::memory_order_acquire) || s_->error) return -1;
  return s_->source;
}

bool Work::test() {
  BRAID_CHECK_ARG(s_ != nullptr, "Work::test on an empty handle");
  std::lock_guard<std::mutex> l(s_->mu);
  if (s_->done && s_->error) std::rethrow_exception(s_->error);
  return s_->done;
}

// ---- argument checks ----------------------------------------------------------

namespace {

// Set while a blocking call is issuing its operation, so the shared _async
// code runs it inline instead of queueing it.
thread_local bool t_blocking = false;
struct BlockingScope {
  BlockingScope() { t_blocking = true; }
  ~BlockingScope() { t_blocking = false; }
};
bool async_now() { return !t_blocking; }

const char* opname(CollOp op) { return comm::coll_op_name(op); }

size_t checked_bytes(CollOp op, size_t count, DType t, size_t multiple) {
  if (unsigned(t) >= unsigned(kNumDTypes))
    throw Error(Errc::kInvalidArgument,
                std::string(opname(op)) + ": unknown dtype " + std::to_string(int(t)));
  size_t es = dtype_size(t);
  size_t limit = std::numeric_limits<size_t>::max() / 4;
  if (count > limit / es / std::max<size_t>(multiple, 1))
    throw Error(Errc::kInvalidArgument, std::string(opname(op)) + ": count " +
                                            std::to_string(count) + " × " +
                                            std::to_string(multiple) + " ranks of " +
                                            dtype_name(t) + " overflows the byte size");
  return count * es * std::max<size_t>(multiple, 1);
}

void check_ptr(CollOp op, const void* p, size_t count, const char* which) {
  if (p == nullptr && count > 0)
    throw Error(Errc::kInvalidArgument, std::string(opname(op)) + ": " + which +
                                            " buffer is null but count is " +
                                            std::to_string(count));
}

void check_rank(CollOp op, int r, int size, const char* which) {
  if (r < 0 || r >= size)
    throw Error(Errc::kInvalidArgument, std::string(opname(op)) + ": " + which + " " +
                                            std::to_string(r) + " is out of range [0, " +
                                            std::to_string(size) + ")");
}

void check_op(CollOp op, DType t, ReduceOp rop) {
  if (unsigned(rop) >= unsigned(kNumReduceOps))
    throw Error(Errc::kInvalidArgument,
                std::string(opname(op)) + ": unknown reduce op " + std::to_string(int(rop)));
  if (!reduce_op_supported(rop, t))
    throw Error(Errc::kNotSupported, std::string(opname(op)) + ": reduce op " +
                                            reduce_op_name(rop) + " is not defined for " +
                                            dtype_name(t));
}

}  // namespace

// ---- construction -------------------------------------------------------------

Communicator::Communicator(std::unique_ptr<comm::CommImpl> impl) : impl_(std::move(impl)) {}
Communicator::~Communicator() = default;

std::shared_ptr<Communicator> Communicator::create(int rank, int size,
                                                   std::shared_ptr<Store> store,
                                                   const CommOptions& opt) {
  auto impl = std::make_unique<comm::CommImpl>(rank, size, std::move(store), "braid/", opt);
  return std::shared_ptr<Communicator>(new Communicator(std::move(impl)));
}

int Communicator::rank() const { return impl_->rank(); }
int Communicator::size() const { return impl_->size(); }
int Communicator::host_size() const { return impl_->host_size(); }

void Communicator::set_async_inline(bool on) { impl_->set_async_inline(on); }

std::shared_ptr<Communicator> Communicator::split(int color, int key) {
  auto sub = impl_->split(color, key);
  if (!sub) return nullptr;
  return std::shared_ptr<Communicator>(new Communicator(std::move(sub)));
}

void Communicator::set_algorithm(const std::string& collective, const std::string& a) {
  impl_->selector().set_override(collective, a);
}

std::vector<std::string> Communicator::algorithms(const std::string& collective) const {
  std::vector<std::string> out;
  for (const comm::algo::Algorithm* a : comm::algo::algorithms(comm::parse_coll_op(collective)))
    if (impl_->selector().why_not(*a) == nullptr) out.push_back(a->name);
  return out;
}

std::string Communicator::chosen_algorithm(const std::string& collective, size_t bytes) const {
  return impl_->selector().choose(comm::parse_coll_op(collective), bytes, DType::kF32);
}

double Communicator::predicted_seconds(const std::string& collective, const std::string& algo,
                                       size_t bytes) const {
  return impl_->selector().predict(comm::parse_coll_op(collective), algo, bytes);
}

std::string Communicator::flight_record() const { return impl_->flight_record(); }

std::string Communicator::last_algorithm() const { return impl_->last_algorithm(); }

std::string Communicator::transport_to(int peer) const {
  check_rank(CollOp::kSend, peer, size(), "peer");
  return impl_->transport_to(peer);
}

std::string Communicator::link_class_to(int peer) const {
  check_rank(CollOp::kSend, peer, size(), "peer");
  return impl_->link_class_to(peer);
}

std::string Communicator::host_of(int peer) const {
  check_rank(CollOp::kSend, peer, size(), "peer");
  return impl_->host_of(peer);
}

// ---- shared memory ------------------------------------------------------------

void* SharedBuffer::data() const { return r_ ? r_->base : nullptr; }
size_t SharedBuffer::bytes() const { return r_ ? r_->bytes : 0; }
bool SharedBuffer::shared() const { return r_ && r_->shared; }

SharedBuffer Communicator::alloc_shared(size_t bytes) {
  SharedBuffer b;
  b.r_ = comm::alloc_shared_region(*this, impl_->shared_registry(), bytes);
  return b;
}

// ---- collectives -----------------------------------------------------------
// Each call checks its arguments, then runs the algorithm the registry entry
// chosen for it names (comm/algo/registry.h), with its arguments in a Call.

namespace {

algo::Call call(comm::CommImpl& impl, const void* send, void* recv, size_t count, int root) {
  algo::Call k;
  k.send = send;
  k.recv = recv;
  k.count = count;
  k.root = root;
  k.chunk_bytes = impl.chunk_bytes();
  k.comm = &impl;
  return k;
}

// A rootless collective whose `bytes` at `span_buf` (its output, or for
// reduce_scatter its input) may lie in memory the host's ranks share.
Work launch_spanned(comm::CommImpl& impl, CollOp op, const void* send, void* recv, size_t count,
                    DType t, ReduceOp rop, size_t bytes, const void* span_buf) {
  check_ptr(op, send, count, "send");
  check_ptr(op, recv, count, "recv");
  algo::Call k = call(impl, send, recv, count, -1);
  k.span = impl.shared_span(span_buf, bytes);
  return impl.launch(op, count, t, rop, -1, bytes, async_now(), k);
}

}  // namespace

Work Communicator::broadcast_async(void* buf, size_t count, DType t, int root) {
  const CollOp op = CollOp::kBroadcast;
  size_t bytes = checked_bytes(op, count, t, 1);
  check_ptr(op, buf, count, "data");
  check_rank(op, root, size(), "root");
  algo::Call k = call(*impl_, buf, buf, count, root);
  return impl_->launch(op, count, t, ReduceOp::kSum, root, bytes, async_now(), k);
}

Work Communicator::reduce_async(const void* send, void* recv, size_t count, DType t,
                                ReduceOp rop, int root) {
  const CollOp op = CollOp::kReduce;
  size_t bytes = checked_bytes(op, count, t, 1);
  check_op(op, t, rop);
  check_rank(op, root, size(), "root");
  check_ptr(op, send, count, "send");
  if (rank() == root) check_ptr(op, recv, count, "recv");
  return impl_->launch(op, count, t, rop, root, bytes, async_now(), call(*impl_, send, recv, count, root));
}

Work Communicator::all_reduce_async(const void* send, void* recv, size_t count, DType t,
                                    ReduceOp rop) {
  const CollOp op = CollOp::kAllReduce;
  size_t bytes = checked_bytes(op, count, t, 1);
  check_op(op, t, rop);
  return launch_spanned(*impl_, op, send, recv, count, t, rop, bytes, recv);
}

Work Communicator::all_gather_async(const void* send, void* recv, size_t count, DType t) {
  const CollOp op = CollOp::kAllGather;
  size_t bytes = checked_bytes(op, count, t, size_t(size()));
  return launch_spanned(*impl_, op, send, recv, count, t, ReduceOp::kSum, bytes, recv);
}

Work Communicator::reduce_scatter_async(const void* send, void* recv, size_t count, DType t,
                                        ReduceOp rop) {
  const CollOp op = CollOp::kReduceScatter;
  size_t bytes = checked_bytes(op, count, t, size_t(size()));
  check_op(op, t, rop);
  return launch_spanned(*impl_, op, send, recv, count, t, rop, bytes, send);
}

Work Communicator::gather_async(const void* send, void* recv, size_t count, DType t, int root) {
  const CollOp op = CollOp::kGather;
  size_t bytes = checked_bytes(op, count, t, size_t(size()));
  check_rank(op, root, size(), "root");
  check_ptr(op, send, count, "send");
  if (rank() == root) check_ptr(op, recv, count, "recv");
  return impl_->launch(op, count, t, ReduceOp::kSum, root, bytes, async_now(),
                       call(*impl_, send, recv, count, root));
}

Work Communicator::scatter_async(const void* send, void* recv, size_t count, DType t, int root) {
  const CollOp op = CollOp::kScatter;
  size_t bytes = checked_bytes(op, count, t, size_t(size()));
  check_rank(op, root, size(), "root");
  if (rank() == root) check_ptr(op, send, count, "send");
  check_ptr(op, recv, count, "recv");
  return impl_->launch(op, count, t, ReduceOp::kSum, root, bytes, async_now(),
                       call(*impl_, send, recv, count, root));
}

Work Communicator::all_to_all_async(const void* send, void* recv, size_t count, DType t) {
  const CollOp op = CollOp::kAllToAll;
  const int n = size();
  size_t bytes = checked_bytes(op, count, t, size_t(n));
  check_ptr(op, send, count, "send");
  check_ptr(op, recv, count, "recv");
  algo::Call k = call(*impl_, send, recv, count, -1);
  k.blocks.send_counts.assign(size_t(n), count);
  k.blocks.send_displs.resize(size_t(n));
  for (int i = 0; i < n; ++i) k.blocks.send_displs[size_t(i)] = size_t(i) * count;
  k.blocks.recv_counts = k.blocks.send_counts;
  k.blocks.recv_displs = k.blocks.send_displs;
  return impl_->launch(op, count, t, ReduceOp::kSum, -1, bytes, async_now(), k);
}

void Communicator::all_to_all_v(const void* send, const std::vector<size_t>& send_counts,
                                const std::vector<size_t>& send_displs, void* recv,
                                const std::vector<size_t>& recv_counts,
                                const std::vector<size_t>& recv_displs, DType t) {
  const CollOp op = CollOp::kAllToAllV;
  const size_t n = size_t(size());
  BRAID_CHECK_ARG(send_counts.size() == n && send_displs.size() == n && recv_counts.size() == n &&
                      recv_displs.size() == n,
                  "all_to_all_v: counts and displacements need one entry per rank (" +
                      std::to_string(n) + ")");
  size_t stotal = 0, rtotal = 0;
  for (size_t i = 0; i < n; ++i) {
    stotal = std::max(stotal, send_displs[i] + send_counts[i]);
    rtotal = std::max(rtotal, recv_displs[i] + recv_counts[i]);
  }
  checked_bytes(op, std::max(stotal, rtotal), t, 1);
  check_ptr(op, send, stotal, "send");
  check_ptr(op, recv, rtotal, "recv");
  algo::Call k = call(*impl_, send, recv, 0, -1);
  k.blocks = {send_counts, send_displs, recv_counts, recv_displs};
  // The sig's count is 0: per-pair lengths differ legitimately and are
  // checked message by message (each header carries its byte length).
  impl_->launch(op, 0, t, ReduceOp::kSum, -1, stotal * dtype_size(t), false, k);
}

Work Communicator::barrier_async() {
  return impl_->launch(CollOp::kBarrier, 0, DType::kU8, ReduceOp::kSum, -1, 0, async_now(),
                       call(*impl_, nullptr, nullptr, 0, -1));
}

Work Communicator::send_async(const void* buf, size_t count, DType t, int peer, uint32_t tag) {
  const CollOp op = CollOp::kSend;
  size_t bytes = checked_bytes(op, count, t, 1);
  check_rank(op, peer, size(), "peer");
  BRAID_CHECK_ARG(peer != rank(), "send: peer " + std::to_string(peer) + " is this rank");
  check_ptr(op, buf, count, "send");
  BRAID_CHECK_ARG(tag <= uint32_t(std::numeric_limits<int32_t>::max()), "send: tag too large");
  return impl_->launch_p2p(true, buf, nullptr, count, t, peer, int(tag), bytes, async_now());
}

Work Communicator::recv_async(void* buf, size_t count, DType t, int peer, uint32_t tag) {
  const CollOp op = CollOp::kSend;  // matched against the sender's kSend signature
  size_t bytes = checked_bytes(op, count, t, 1);
  check_rank(CollOp::kRecv, peer, size(), "peer");
  BRAID_CHECK_ARG(peer != rank(), "recv: peer " + std::to_string(peer) + " is this rank");
  check_ptr(CollOp::kRecv, buf, count, "recv");
  BRAID_CHECK_ARG(tag <= uint32_t(std::numeric_limits<int32_t>::max()), "recv: tag too large");
  return impl_->launch_p2p(false, nullptr, buf, count, t, peer, int(tag), bytes, async_now());
}

Work Communicator::recv_any_async(void* buf, size_t count, DType t, uint32_t tag) {
  const CollOp op = CollOp::kSend;  // matched against the sender's kSend signature
  size_t bytes = checked_bytes(op, count, t, 1);
  BRAID_CHECK_ARG(size() > 1, "recv_any: a communicator of one rank has no other rank to receive from");
  check_ptr(CollOp::kRecv, buf, count, "recv_any");
  BRAID_CHECK_ARG(tag <= uint32_t(std::numeric_limits<int32_t>::max()), "recv_any: tag too large");
  return impl_->launch_recv_any(buf, count, t, int(tag), bytes, async_now());
}

// Blocking forms: the async form, issued as a blocking call, then waited
// on; the finished Work. (launch runs it inline when nothing is queued, so
// there is no thread hop on the fast path.)
namespace {
template <class Issue>
Work blocking(const Issue& issue) {
  Work w;
  {
    BlockingScope scope;
    w = issue();
  }
  w.wait();
  return w;
}
}  // namespace

void Communicator::broadcast(void* buf, size_t count, DType t, int root) {
  blocking([&] { return broadcast_async(buf, count, t, root); });
}
void Communicator::reduce(const void* s, void* r, size_t count, DType t, ReduceOp op, int root) {
  blocking([&] { return reduce_async(s, r, count, t, op, root); });
}
void Communicator::all_reduce(const void* s, void* r, size_t count, DType t, ReduceOp op) {
  blocking([&] { return all_reduce_async(s, r, count, t, op); });
}
void Communicator::all_gather(const void* s, void* r, size_t count, DType t) {
  blocking([&] { return all_gather_async(s, r, count, t); });
}
void Communicator::reduce_scatter(const void* s, void* r, size_t count, DType t, ReduceOp op) {
  blocking([&] { return reduce_scatter_async(s, r, count, t, op); });
}
void Communicator::gather(const void* s, void* r, size_t count, DType t, int root) {
  blocking([&] { return gather_async(s, r, count, t, root); });
}
void Communicator::scatter(const void* s, void* r, size_t count, DType t, int root) {
  blocking([&] { return scatter_async(s, r, count, t, root); });
}
void Communicator::all_to_all(const void* s, void* r, size_t count, DType t) {
  blocking([&] { return all_to_all_async(s, r, count, t); });
}
void Communicator::barrier() { blocking([&] { return barrier_async(); }); }
void Communicator::send(const void* buf, size_t count, DType t, int peer, uint32_t tag) {
  blocking([&] { return send_async(buf, count, t, peer, tag); });
}
void Communicator::recv(void* buf, size_t count, DType t, int peer, uint32_t tag) {
  blocking([&] { return recv_async(buf, count, t, peer, tag); });
}
int Communicator::recv_any(void* buf, size_t count, DType t, uint32_t tag) {
  return blocking([&] { return recv_any_async(buf, count, t, tag); }).source();
}

}  // namespace braid
