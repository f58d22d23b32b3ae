#include "process_group.h"

#include <cstdlib>
#include <limits>
#include <utility>

#include "braid/error.h"
#include "dtype_map.h"
#include "store_adapter.h"
#include "threads.h"

namespace braid_torch {

using c10d::OpType;
using detail::dense;
using detail::nbytes;
using detail::ptr;
using detail::require;
using detail::single;

namespace detail {

at::Tensor dense(const at::Tensor& t) { return t.is_contiguous() ? t : t.contiguous(); }

at::Tensor output_buffer(const at::Tensor& out, std::function<void()>& back) {
  if (out.is_contiguous()) return out;
  at::Tensor buf = at::empty_like(out, at::MemoryFormat::Contiguous);
  back = [out, buf]() mutable { out.copy_(buf); };
  return buf;
}

void* ptr(const at::Tensor& t) {
  // braid refuses null buffers, and an empty tensor may have none; no byte
  // of it is touched for a zero count.
  static char empty;
  void* p = t.data_ptr();
  return p ? p : &empty;
}

size_t nbytes(const at::Tensor& t) { return size_t(t.numel()) * t.element_size(); }

void require(bool cond, const char* op, const std::string& msg) {
  if (!cond) throw braid::Error(braid::Errc::kInvalidArgument, std::string("braid_torch ") + op + ": " + msg);
}

const at::Tensor& single(const std::vector<at::Tensor>& ts, const char* op) {
  require(ts.size() == 1, op,
          "expected one tensor per call (one CPU device), got " + std::to_string(ts.size()));
  check_cpu_tensor(ts[0], std::string(op) + " tensor");
  return ts[0];
}

at::Tensor flatten_same(const std::vector<at::Tensor>& ts, const at::Tensor& like, const std::string& what) {
  for (size_t i = 0; i < ts.size(); ++i) {
    check_cpu_tensor(ts[i], what + " " + std::to_string(i));
    require(ts[i].scalar_type() == like.scalar_type() && ts[i].numel() == like.numel(), what.c_str(),
            "tensor " + std::to_string(i) + " is " + c10::toString(ts[i].scalar_type()) + "[" +
                std::to_string(ts[i].numel()) + "], expected " + c10::toString(like.scalar_type()) +
                "[" + std::to_string(like.numel()) + "] like the others");
  }
  at::Tensor flat = at::empty({int64_t(ts.size()) * like.numel()}, like.options());
  for (size_t i = 0; i < ts.size(); ++i)
    flat.narrow(0, int64_t(i) * like.numel(), like.numel()).view(ts[i].sizes()).copy_(ts[i]);
  return flat;
}

void unflatten_into(const at::Tensor& flat, const std::vector<at::Tensor>& outs) {
  int64_t off = 0;
  for (const auto& o : outs) {
    o.copy_(flat.narrow(0, off, o.numel()).view(o.sizes()));
    off += o.numel();
  }
}

}  // namespace detail

namespace {

// The tag of monitoredBarrier's messages: the largest braid accepts, which
// send and recv refuse (torch passes an int tag; braid takes up to INT32_MAX).
constexpr uint32_t kMonitoredBarrierTag = uint32_t(std::numeric_limits<int32_t>::max());

std::string job_secret(const c10::intrusive_ptr<c10d::Store>& store, int rank) {
  if (const char* s = std::getenv("BRAID_SECRET"); s && *s) return s;
  const std::string key = "braid_torch/secret";
  if (rank == 0) {
    std::string secret = braid::make_job_secret();
    store->set(key, std::vector<uint8_t>(secret.begin(), secret.end()));
    return secret;
  }
  auto v = store->get(key);
  return std::string(v.begin(), v.end());
}

// Copies `buf` back into `t` when it is a staging copy.
std::function<void()> copy_back(const at::Tensor& t, const at::Tensor& buf) {
  if (buf.is_same(t)) return nullptr;
  return [t, buf]() mutable { t.copy_(buf); };
}

}  // namespace

ProcessGroupBraid::ProcessGroupBraid(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                     int size, std::chrono::milliseconds timeout)
    : BackendBase(rank, size), timeout_(timeout) {
  braid::CommOptions opt;
  opt.timeout = timeout;
  try {
    opt.secret = job_secret(store, rank);
  } catch (const braid::Error&) {
    throw;
  } catch (const std::exception& e) {
    throw braid::Error(braid::Errc::kTimeout,
                       "braid_torch: rank " + std::to_string(rank) +
                           " could not read the job secret rank 0 publishes in the c10d store: " +
                           e.what());
  }
  comm_ = braid::Communicator::create(
      rank, size, braid::make_prefix_store(adapt_store(store, timeout), "braid/"), opt);
  collectives_ = std::make_shared<Completer>();
  p2p_ = std::make_shared<Completer>();
  cap_compute_threads(comm_->host_size());
  comm_->set_async_inline(collectives_inline(comm_->host_size()));
}

ProcessGroupBraid::~ProcessGroupBraid() {
  collectives_.reset();
  p2p_.reset();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::enqueue(OpType type, std::vector<braid::Work> works,
                                                          std::function<void()> finish,
                                                          std::vector<at::Tensor> keep,
                                                          std::vector<at::Tensor> outputs, bool p2p) {
  if (!p2p) ++seq_;
  auto w = c10::make_intrusive<BraidWork>(rank_, type, std::move(works), std::move(finish),
                                          std::move(keep), std::move(outputs),
                                          p2p ? p2p_ : collectives_);
  if (w->has_copy_out()) w->hand_to_completer();
  return w;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::finished(OpType type, std::function<void()> finish,
                                                           std::vector<at::Tensor> outputs) {
  auto w = c10::make_intrusive<BraidWork>(rank_, type, std::vector<braid::Work>{}, std::move(finish),
                                          std::vector<at::Tensor>{}, std::move(outputs),
                                          std::weak_ptr<Completer>{});
  w->complete_blocking();
  return w;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::broadcast(std::vector<at::Tensor>& tensors,
                                                            const c10d::BroadcastOptions& opts) {
  const at::Tensor& t = single(tensors, "broadcast");
  require(opts.rootTensor == 0, "broadcast", "rootTensor must be 0 (one tensor per rank)");
  at::Tensor buf = dense(t);
  auto w = comm_->broadcast_async(ptr(buf), nbytes(buf), braid::DType::kU8, int(opts.rootRank));
  return enqueue(OpType::BROADCAST, {w}, copy_back(t, buf), {buf}, tensors);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::allreduce(std::vector<at::Tensor>& tensors,
                                                            const c10d::AllreduceOptions& opts) {
  if (tensors.size() == 1 && tensors[0].defined() && tensors[0].is_sparse())
    return allreduce_sparse_coo(tensors, opts);
  const at::Tensor& t = single(tensors, "allreduce");
  Reduction r = map_reduction(t.scalar_type(), opts.reduceOp, "allreduce");
  at::Tensor buf = dense(t);
  auto w = comm_->all_reduce_async(ptr(buf), ptr(buf), size_t(buf.numel()) * r.per_element,
                                   r.dtype, r.op);
  return enqueue(OpType::ALLREDUCE, {w}, copy_back(t, buf), {buf}, tensors);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  require(!tensors.empty(), "allreduce_coalesced", "no tensors given");
  for (size_t i = 0; i < tensors.size(); ++i) {
    check_cpu_tensor(tensors[i], "allreduce_coalesced tensor " + std::to_string(i));
    require(tensors[i].scalar_type() == tensors[0].scalar_type(), "allreduce_coalesced",
            "tensor " + std::to_string(i) + " is " + c10::toString(tensors[i].scalar_type()) +
                ", tensor 0 " + c10::toString(tensors[0].scalar_type()) + ": all must share a dtype");
  }
  Reduction r = map_reduction(tensors[0].scalar_type(), opts.reduceOp, "allreduce_coalesced");
  std::vector<at::Tensor> flat_parts;
  for (const auto& t : tensors) flat_parts.push_back(t.reshape({-1}));
  at::Tensor flat = at::cat(flat_parts);
  auto w = comm_->all_reduce_async(ptr(flat), ptr(flat), size_t(flat.numel()) * r.per_element,
                                   r.dtype, r.op);
  std::vector<at::Tensor> outs = tensors;
  return enqueue(OpType::ALLREDUCE_COALESCED, {w},
                 [flat, outs] { detail::unflatten_into(flat, outs); }, {flat}, tensors);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::reduce(std::vector<at::Tensor>& tensors,
                                                         const c10d::ReduceOptions& opts) {
  const at::Tensor& t = single(tensors, "reduce");
  require(opts.rootTensor == 0, "reduce", "rootTensor must be 0 (one tensor per rank)");
  Reduction r = map_reduction(t.scalar_type(), opts.reduceOp, "reduce");
  at::Tensor buf = dense(t);
  const int root = int(opts.rootRank);
  auto w = comm_->reduce_async(ptr(buf), ptr(buf), size_t(buf.numel()) * r.per_element, r.dtype,
                               r.op, root);
  return enqueue(OpType::REDUCE, {w}, root == rank_ ? copy_back(t, buf) : nullptr, {buf}, tensors);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::send(std::vector<at::Tensor>& tensors, int dst,
                                                       int tag) {
  const at::Tensor& t = single(tensors, "send");
  require(tag >= 0 && uint32_t(tag) < kMonitoredBarrierTag, "send",
          "tag " + std::to_string(tag) + " is negative or INT32_MAX (monitored_barrier's own)");
  at::Tensor buf = dense(t);
  auto w = comm_->send_async(ptr(buf), nbytes(buf), braid::DType::kU8, dst, uint32_t(tag));
  return enqueue(OpType::SEND, {w}, nullptr, {buf}, tensors, true);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::recv(std::vector<at::Tensor>& tensors, int src,
                                                       int tag) {
  return receive(tensors, src, tag);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::recvAnysource(std::vector<at::Tensor>& tensors,
                                                                int tag) {
  return receive(tensors, -1, tag);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::receive(std::vector<at::Tensor>& tensors, int src,
                                                          int tag) {
  const at::Tensor& t = single(tensors, "recv");
  require(tag >= 0 && uint32_t(tag) < kMonitoredBarrierTag, "recv",
          "tag " + std::to_string(tag) + " is negative or INT32_MAX (monitored_barrier's own)");
  std::function<void()> back;
  at::Tensor buf = detail::output_buffer(t, back);
  const auto n = nbytes(buf);
  auto w = src < 0 ? comm_->recv_any_async(ptr(buf), n, braid::DType::kU8, uint32_t(tag))
                   : comm_->recv_async(ptr(buf), n, braid::DType::kU8, src, uint32_t(tag));
  return enqueue(src < 0 ? OpType::RECVANYSOURCE : OpType::RECV, {w}, back, {buf}, tensors, true);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::barrier(const c10d::BarrierOptions&) {
  return enqueue(OpType::BARRIER, {comm_->barrier_async()}, nullptr, {}, {});
}

}  // namespace braid_torch

namespace braid_torch {


void ProcessGroupBraid::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  using namespace std::chrono;
  const milliseconds timeout = opts.timeout.count() >= 0 ? duration_cast<milliseconds>(opts.timeout)
                                                         : timeout_;
  const auto deadline = steady_clock::now() + timeout;
  auto left = [&] {
    return std::max(milliseconds(0), duration_cast<milliseconds>(deadline - steady_clock::now()));
  };
  static uint8_t token = 1;
  if (rank_ != 0) {
    // Kept by the group: a receive that times out still writes here later.
    monitor_buffers_.push_back(std::make_shared<std::vector<uint8_t>>(1));
    uint8_t* ack = monitor_buffers_.back()->data();
    auto s = comm_->send_async(&token, 1, braid::DType::kU8, 0, kMonitoredBarrierTag);
    auto r = comm_->recv_async(ack, 1, braid::DType::kU8, 0, kMonitoredBarrierTag);
    if (!s.wait_for(left()) || !r.wait_for(left()))
      throw braid::Error(braid::Errc::kTimeout,
                         "Rank " + std::to_string(rank_) +
                             " successfully reached monitoredBarrier, but received errors while waiting "
                             "for send/recv from rank 0 (braid_torch: no answer within " +
                             std::to_string(timeout.count()) + " ms)");
    return;
  }
  monitor_buffers_.push_back(std::make_shared<std::vector<uint8_t>>(size_));
  std::vector<uint8_t>& got = *monitor_buffers_.back();
  std::vector<braid::Work> recvs(size_);
  for (int r = 1; r < size_; ++r)
    recvs[r] = comm_->recv_async(&got[r], 1, braid::DType::kU8, r, kMonitoredBarrierTag);
  std::vector<int> late;
  for (int r = 1; r < size_; ++r) {
    // Rank 0's own time ran out before it could wait for rank r.
    if (!wait_all_ranks && left().count() == 0 && !recvs[r].test())
      throw braid::Error(braid::Errc::kTimeout,
                         "Rank 0 timed out in monitoredBarrier after " +
                             std::to_string(timeout.count()) + " ms (braid_torch)");
    if (recvs[r].wait_for(left())) continue;
    late.push_back(r);
    if (!wait_all_ranks) break;
  }
  if (!late.empty()) {
    std::string msg;
    if (late.size() == 1) {
      msg = "Rank " + std::to_string(late[0]) + " failed to pass monitoredBarrier in " +
            std::to_string(timeout.count()) + " ms";
    } else {
      msg = "Ranks ";
      for (size_t i = 0; i < late.size(); ++i) msg += (i ? ", " : "") + std::to_string(late[i]);
      msg += " failed to pass monitoredBarrier in " + std::to_string(timeout.count()) + " ms";
    }
    throw braid::Error(braid::Errc::kTimeout, msg + " (braid_torch)");
  }
  for (int r = 1; r < size_; ++r) comm_->send(&token, 1, braid::DType::kU8, r, kMonitoredBarrierTag);
}

}  // namespace braid_torch
