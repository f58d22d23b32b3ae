// BraidWork: a c10d::Work over one or more braid::Work handles.
//
// The braid operations run on the communicator's background thread (or on
// the thread that waits for them first, when the worker has not picked
// them up yet); a BraidWork completes when all of them have. Completion
// happens once, in whichever thread sees it first — a caller of wait() or
// isCompleted(), or the process group's Completer thread, which blocks on
// each queued work in turn (no polling) — and consists of: running the
// copy-out step (staging buffers back into the caller's tensors), then
// marking the c10d future with the output tensors, or with the error.
//
// A work goes to the Completer only when something may observe it without
// wait()/isCompleted(): when it has a copy-out step (its result must reach
// the caller's tensors anyway), or once getFuture() is called (a future's
// callbacks — DDP's reducer, communication hooks — must run without anyone
// waiting on the work). The common `dist.all_reduce(t)` therefore wakes no
// thread of the binding's: issued, then waited on the caller's thread. A
// work dropped unfinished waits for its operations in its destructor, so
// the buffers it keeps outlive them.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "braid/comm.h"

namespace braid_torch {

class Completer;

class BraidWork : public c10d::Work {
 public:
  // `works` complete in any order; `finish` runs once after all succeed;
  // `keep` holds every buffer the braid operations read or write until
  // then; `outputs` is the future's value and result().
  BraidWork(int rank, c10d::OpType type, std::vector<braid::Work> works,
            std::function<void()> finish, std::vector<at::Tensor> keep,
            std::vector<at::Tensor> outputs, std::weak_ptr<Completer> completer);
  ~BraidWork() override;
  // True when the work must go to the Completer as soon as it is issued.
  bool has_copy_out() const { return static_cast<bool>(finish_); }

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override;
  void synchronize() override {}
  // Blocks until done (kNoTimeout: the communicator's own deadline) and
  // rethrows the operation's error; throws braid::Error(kTimeout) when
  // `timeout` passes first (the operation keeps running).
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  // A receive from any source, once complete: the rank it received from.
  int sourceRank() const override;

  // Blocks until the braid operations end, then completes. For the
  // Completer thread.
  void complete_blocking();
  // Queues this work on its Completer, once; completes it here when the
  // Completer is gone (its process group destroyed: the operations ended).
  void hand_to_completer();

 private:
  // Runs `finish` (when e is null) and records the outcome; once.
  void settle(std::exception_ptr e);

  std::vector<braid::Work> works_;
  std::function<void()> finish_;
  std::vector<at::Tensor> keep_;
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::weak_ptr<Completer> completer_;
  std::atomic<bool> handed_{false};  // given to the Completer (at most once)
  std::mutex settle_mu_;  // serialises settle(); mutex_ (Work's) guards the state
};

// A thread that completes queued works in their issue order, blocking on
// each; one per queue of operations that complete in order.
//
// Completing a work runs its future's callbacks on this thread, and a
// callback may issue another collective and wait for its future (PowerSGD's
// hook does, twice per bucket). Queued behind the callback waiting for it,
// that work would never complete; so a work pushed from inside a callback
// on this Completer's thread gets a thread of its own, which completes it
// (and runs its own future's callbacks) while the callback waits. The
// callbacks of queued works still run one at a time, in completion order,
// on this thread: the collectives they issue leave every rank in the same
// order.
class Completer {
 public:
  Completer();
  ~Completer();  // completes what is queued (or sees it fail), then joins
  void push(c10::intrusive_ptr<BraidWork> w);

 private:
  struct Nested {
    std::thread th;
    bool done = false;  // its work has completed (mu_)
  };
  void run();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<c10::intrusive_ptr<BraidWork>> q_;
  bool stop_ = false;
  std::list<Nested> nested_;  // threads of works pushed from callbacks (mu_; nodes stay put)
  std::thread th_;
};

}  // namespace braid_torch
