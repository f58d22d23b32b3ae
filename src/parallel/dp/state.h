// What one rank's DataParallel holds, and the mechanics every ZeRO policy
// shares: waiting (timed as exposed communication), the walk over units,
// parameter gathers and the gradient reduction of a bucket. Private to
// src/parallel/dp. The stage-specific parts are the ZeroPolicy's
// (zero_policy.h); the reduction calls the policy for the collective.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "braid/data_parallel.h"
#include "braid/env.h"
#include "parallel/dp/bucket.h"

namespace braid::parallel::dp {

class ZeroPolicy;

struct State {
  std::shared_ptr<Communicator> comm;
  DpOptions opts;
  ZeroPolicy* policy = nullptr;  // owned by DataParallel
  bool background = true;        // bucket reductions on the worker thread
  int rank = 0, world = 1;
  std::vector<nn::Parameter*> params;
  std::vector<nn::Module*> units;
  std::vector<std::unique_ptr<Bucket>> buckets;  // reduction (grad-ready) order
  std::unordered_map<const nn::Parameter*, size_t> bucket_of;
  std::vector<std::vector<size_t>> unit_buckets;  // buckets touching unit u
  // The optimizer's view of this rank's chunk when it is sharded: one
  // Parameter per slice, viewing the shard buffers.
  std::vector<std::unique_ptr<nn::Parameter>> shard_params_owned;
  std::vector<nn::Parameter*> shard_params;
  double comm_wait_s = 0;
  int64_t transient_bytes = 0, peak_transient_bytes = 0;

  // ---- waiting ----
  // Runs a blocking communication call, counting its time as waiting.
  template <class F>
  void waited(F&& call) {
    const double t0 = now_s();
    call();
    comm_wait_s += now_s() - t0;
  }
  void wait(Work& w);
  // Full-size buffers allocated (+) or freed (−) between steps' states.
  void track(int64_t delta);

  // ---- units ----
  static constexpr size_t kNone = size_t(-1);
  // The nearest unit with parameters at or beyond `from`, walking by `dir`
  // (+1 forward order, −1 backward order); kNone when there is none. The
  // one walk behind every prefetch and every "keep the last unit" decision.
  size_t unit_with_params(int64_t from, int dir) const;
  template <class F>
  void for_buckets_of(size_t unit, F&& f) {
    if (unit == kNone) return;
    for (size_t bi : unit_buckets[unit]) f(*buckets[bi]);
  }

  // ---- parameters ----
  // Waits for the bucket's pending gather; issues it first when its
  // parameters are released and nobody has asked for them yet.
  void wait_params(Bucket& b);

  // ---- gradients (gradients.cc) ----
  void ensure_grads(Bucket& b);   // allocate zeroed full gradients if released
  void release_grads(Bucket& b);  // free the full gradients
  void launch(Bucket& b);         // start the bucket's reduction
  void complete(Bucket& b);       // wait for it to end
  void sum_bf16_chunk(Bucket& b);
  // Completes reductions already finished, without issuing collectives.
  void poll_done();
  // Waits for the oldest reductions in flight until at most `n` remain.
  void bound_in_flight(int n);
  void finish_gradients();
};

}  // namespace braid::parallel::dp
