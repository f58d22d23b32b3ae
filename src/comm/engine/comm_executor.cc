// CommImpl's executor: a call runs inline on the caller's thread when
// nothing is queued ahead of it, else it joins the queue that the worker
// thread drains in order; either way each call meets the failure state
// first and records itself in the flight recorder.
#include "comm/engine/comm_impl.h"

#include <sstream>

#include "braid/log.h"

namespace braid::comm {
namespace {


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
  // inline_busy_ too: another thread's Work::wait may be running a queued
  // operation (run_queued_until), e.g. a completion thread while the
  // issuing thread calls on; two operations at once would cross messages.
  std::lock_guard<std::mutex> l(qmu_);
  if (!queue_.empty() || worker_busy_ || inline_busy_) return false;
  inline_busy_ = true;
  return true;
}

void CommImpl::run_inline(const MsgSig& sig, const algo::Algorithm& a, const algo::Call& call,
                          uint64_t id) {
  auto release = [&] {
    if (!worker_started_.load(std::memory_order_acquire)) return;
    {
      std::lock_guard<std::mutex> l(qmu_);
      inline_busy_ = false;
    }
    qcv_.notify_all();
  };
  try {
    execute(sig, a, call, id);
  } catch (...) {
    release();
    throw;
  }
  release();
}

Work CommImpl::launch_queued(const MsgSig& sig, const algo::Algorithm& a,
                             const algo::Call& call, uint64_t id, bool async) {
  auto w = std::make_shared<WorkState>();
  w->timeout = timeout_;
  w->owner = this;
  w->run = [this, sig, a = &a, call, id] { execute(sig, *a, call, id); };
  if (async) enqueue(w);
  else run_blocking(w);
  return Work(w);
}

Work CommImpl::run_here(const MsgSig& sig, const algo::Algorithm& a, const algo::Call& call,
                        uint64_t id) {
  try {
    if (inline_begin()) run_inline(sig, a, call, id);
    else launch_queued(sig, a, call, id, false);
    return Work(completed_work());
  } catch (...) {
    auto w = std::make_shared<WorkState>();
    w->timeout = timeout_;
    w->owner = this;
    complete(*w, std::current_exception());
    return Work(w);
  }
}

void CommImpl::execute(const MsgSig& sig, const algo::Algorithm& a, const algo::Call& k,
                       uint64_t fr_id) {
  const std::string& algo = a.name;
  if (broken_.load(std::memory_order_acquire)) {
    fr_.finish(fr_id, false);
    throw broken_error(describe_call(sig, algo));
  }
  fr_.start(fr_id, a);
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
    a.run(ctx, k);
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
    if (!queue_.empty() || worker_busy_ || inline_busy_) {  // as inline_begin
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

}  // namespace braid::comm
