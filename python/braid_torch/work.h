// BraidWork: a c10d::Work over one or more braid::Work handles.
//
// The braid operations run on the communicator's background thread; a
// BraidWork completes when all of them have. Completion happens once, in
// whichever thread sees it first — a caller of wait() or isCompleted(),
// or the process group's Completer thread, which blocks on each queued
// work in turn (no polling) — and consists of: running the copy-out step
// (staging buffers back into the caller's tensors), then marking the
// c10d future with the output tensors, or with the error. So a future's
// callbacks (DDP's reducer, communication hooks) run without anyone
// having to wait() on the work.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "braid/comm.h"

namespace braid_torch {

class BraidWork : public c10d::Work {
 public:
  // `works` complete in any order; `finish` runs once after all succeed;
  // `keep` holds every buffer the braid operations read or write until
  // then; `outputs` is the future's value and result().
  BraidWork(int rank, c10d::OpType type, std::vector<braid::Work> works,
            std::function<void()> finish, std::vector<at::Tensor> keep,
            std::vector<at::Tensor> outputs);
  ~BraidWork() override;

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

  // Blocks until the braid operations end, then completes. For the
  // Completer thread.
  void complete_blocking();

 private:
  // Runs `finish` (when e is null) and records the outcome; once.
  void settle(std::exception_ptr e);

  std::vector<braid::Work> works_;
  std::function<void()> finish_;
  std::vector<at::Tensor> keep_;
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::mutex settle_mu_;  // serialises settle(); mutex_ (Work's) guards the state
};

// A thread that completes queued works in their issue order, blocking on
// each; one per queue of operations that complete in order.
class Completer {
 public:
  Completer();
  ~Completer();  // completes what is queued (or sees it fail), then joins
  void push(c10::intrusive_ptr<BraidWork> w);

 private:
  void run();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<c10::intrusive_ptr<BraidWork>> q_;
  bool stop_ = false;
  std::thread th_;
};

}  // namespace braid_torch
