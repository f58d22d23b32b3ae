#include "work.h"

#include <string>
#include <utility>

#include "braid/error.h"

namespace braid_torch {

namespace {

// PyTorch's backends word a timeout " Timed out " (what its tests and users
// match); braid's own message follows, unchanged.
std::exception_ptr torch_wording(std::exception_ptr e, int rank, c10d::OpType type) {
  if (!e) return e;
  try {
    std::rethrow_exception(e);
  } catch (const braid::Error& err) {
    if (err.code() != braid::Errc::kTimeout) return e;
    return std::make_exception_ptr(braid::Error(
        braid::Errc::kTimeout, "braid_torch: rank " + std::to_string(rank) + " " +
                                   c10d::opTypeToString(type) + " Timed out (" + err.what() + ")"));
  } catch (...) {
    return e;
  }
}

}  // namespace

BraidWork::BraidWork(int rank, c10d::OpType type, std::vector<braid::Work> works,
                     std::function<void()> finish, std::vector<at::Tensor> keep,
                     std::vector<at::Tensor> outputs, std::weak_ptr<Completer> completer)
    : c10d::Work(rank, type),
      works_(std::move(works)),
      finish_(std::move(finish)),
      keep_(std::move(keep)),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))),
      completer_(std::move(completer)) {}

BraidWork::~BraidWork() {
  // Nobody waited: the operations may still read or write keep_'s buffers.
  bool done;
  {
    std::lock_guard<std::mutex> l(mutex_);
    done = completed_;
  }
  if (done) return;
  for (auto& w : works_) {
    try {
      w.wait();
    } catch (...) {
      // Its error had no observer; the communicator reports it on the next call.
    }
  }
}

void BraidWork::hand_to_completer() {
  if (handed_.exchange(true)) return;
  {
    std::lock_guard<std::mutex> l(mutex_);
    if (completed_) return;
  }
  if (auto c = completer_.lock()) {
    c->push(c10::intrusive_ptr<BraidWork>::reclaim_copy(this));
  } else {
    complete_blocking();
  }
}

void BraidWork::settle(std::exception_ptr e) {
  std::lock_guard<std::mutex> once(settle_mu_);
  {
    std::lock_guard<std::mutex> l(mutex_);
    if (completed_) return;
  }
  if (!e && finish_) {
    try {
      finish_();
    } catch (...) {
      e = std::current_exception();
    }
  }
  e = torch_wording(e, rank_, retrieveOpType());
  // keep_ stays: a failed work's other operations may still be using it
  // until the Completer has seen them end.
  finish_ = nullptr;
  {
    std::lock_guard<std::mutex> l(mutex_);
    completed_ = true;
    exception_ = e;
  }
  cv_.notify_all();
  // Outside Work's mutex: the future's callbacks may call back into this work.
  if (e)
    future_->setError(e);
  else
    future_->markCompleted(c10::IValue(outputs_));
}

void BraidWork::complete_blocking() {
  std::exception_ptr e;
  for (auto& w : works_) {
    try {
      w.wait();
    } catch (...) {
      if (!e) e = std::current_exception();
    }
  }
  settle(e);
}

bool BraidWork::isCompleted() {
  {
    std::lock_guard<std::mutex> l(mutex_);
    if (completed_) return true;
  }
  std::exception_ptr e;
  for (auto& w : works_) {
    try {
      if (!w.test()) return false;
    } catch (...) {
      e = std::current_exception();
      break;
    }
  }
  settle(e);
  return true;
}

int BraidWork::sourceRank() const {
  if (works_.size() == 1 && works_[0].source() >= 0) return works_[0].source();
  if (opType_ == c10d::OpType::RECVANYSOURCE)
    throw braid::Error(braid::Errc::kInvalidArgument,
                       "braid_torch: a receive from any source knows its sender once it has "
                       "completed: wait() for it first");
  return c10d::Work::sourceRank();  // torch's refusal for other operations
}

bool BraidWork::isSuccess() const {
  std::lock_guard<std::mutex> l(mutex_);
  return completed_ && !exception_;
}

std::exception_ptr BraidWork::exception() const {
  std::lock_guard<std::mutex> l(mutex_);
  return exception_;
}

std::vector<at::Tensor> BraidWork::result() { return outputs_; }

bool BraidWork::wait(std::chrono::milliseconds timeout) {
  if (timeout == kNoTimeout) {
    complete_blocking();
  } else {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::exception_ptr e;
    for (auto& w : works_) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      bool done = false;
      try {
        done = w.wait_for(std::max(left, std::chrono::milliseconds(0)));
      } catch (...) {
        e = std::current_exception();
        break;
      }
      if (!done)
        throw braid::Error(braid::Errc::kTimeout,
                           "braid_torch: rank " + std::to_string(rank_) + " " +
                               c10d::opTypeToString(retrieveOpType()) +
                               " Timed out in wait(timeout=" +
                               std::to_string(timeout.count()) + " ms); it keeps running");
    }
    settle(e);
  }
  std::lock_guard<std::mutex> l(mutex_);
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> BraidWork::getFuture() {
  hand_to_completer();
  return future_;
}

namespace {
// The Completer whose thread this is, if any: its works' callbacks run here.
thread_local const Completer* tl_completer = nullptr;
}  // namespace

Completer::Completer() : th_([this] { run(); }) {}

Completer::~Completer() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  th_.join();
  // Nested works' threads: none is started any more (this thread was the
  // only one running callbacks that push). Joined outside mu_, which each
  // takes once its work has completed.
  std::list<Nested> nested;
  {
    std::lock_guard<std::mutex> l(mu_);
    nested.splice(nested.end(), nested_);
  }
  for (Nested& n : nested) n.th.join();
}

void Completer::push(c10::intrusive_ptr<BraidWork> w) {
  std::lock_guard<std::mutex> l(mu_);
  if (tl_completer == this) {
    // From a callback on this thread, which may wait for this very work.
    // Threads of nested works that have completed are joined first.
    for (auto it = nested_.begin(); it != nested_.end();) {
      if (it->done) {
        it->th.join();
        it = nested_.erase(it);
      } else {
        ++it;
      }
    }
    Nested& n = nested_.emplace_back();
    n.th = std::thread([this, &n, w = std::move(w)] {
      w->complete_blocking();
      std::lock_guard<std::mutex> lk(mu_);
      n.done = true;
    });
    return;
  }
  q_.push_back(std::move(w));
  cv_.notify_one();
}

void Completer::run() {
  tl_completer = this;
  for (;;) {
    c10::intrusive_ptr<BraidWork> w;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return stop_ || !q_.empty(); });
      if (q_.empty()) return;
      w = std::move(q_.front());
      q_.pop_front();
    }
    w->complete_blocking();
  }
}

}  // namespace braid_torch
