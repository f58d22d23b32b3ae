// parallel::DataParallel — gradients averaged across ranks, optionally with
// ZeRO sharding of optimizer state (stage 1), gradients (2) and parameters
// (3). One object per rank; every rank builds the same model, constructs a
// DataParallel over the same communicator, and then drives it the same way
// (DpTrainer in dp_trainer.h does that for you).
//
// Layout. Parameters are grouped into buckets in the order their gradients
// become final (the reverse of the forward order): the first bucket holds
// about DpOptions::first_bucket_bytes (small, so communication starts early
// in backward), later ones about bucket_bytes. Each bucket owns one flat f32
// buffer for gradients (and, for ZeRO 0–2, one for parameters); every
// Parameter's `grad` (and `data`) becomes a view into it, so backward writes
// straight into the buffer that is communicated — no copies. Each bucket is
// padded to a multiple of the world size; rank r owns chunk r of every
// bucket (its shard). Under ZeRO-3, buckets follow the model's top-level
// modules ("units": the children of a Sequential), one bucket per unit.
//
// One optimizer step (what DpTrainer::step calls, in order):
//   begin_step()
//   for each micro-batch:  for each unit u: before_forward(u), forward,
//                          after_forward(u);  loss;  for each unit u in
//                          reverse: before_backward(u), backward with
//                          ctx.grad_ready = hook() on the LAST micro-batch
//                          only (no_sync for the others), after_backward(u)
//   finish_gradients()     waits for the reductions (the "exposed" part)
//   clip_grad_norm(max)    global norm across shards
//   optimizer_step(opt,lr) full (ZeRO 0) or this rank's shard (ZeRO ≥ 1),
//                          then starts the all_gather of updated parameters
//                          (ZeRO 1/2; waited for lazily by before_forward)
//
// Reductions. With overlap (default) a bucket's reduction starts on the
// communicator's background thread as soon as its last gradient is ready:
// all_reduce (ZeRO 0/1) or reduce_scatter into the shard (ZeRO 2/3). The
// per-rank gradients are already scaled by 1/global batch (the loss scale),
// so a SUM across ranks is the average of the ranks' mean gradients — the
// serial gradient. The plain scheme (overlap = false, ZeRO 0 only) does one
// blocking all_reduce per parameter after backward, for comparison.
//
// bf16 gradients (bf16_grads): buckets are rounded to bf16 before they are
// sent, halving bytes on the wire. An all_to_all sends chunk j of every
// rank's bucket to rank j, which sums the contributions in f32 (one rounding
// per contribution, none per hop); ZeRO 2/3 keep that f32 sum as the shard,
// ZeRO 0/1 round it to bf16 once more and all_gather it, and every rank
// widens the same bf16 values to f32.
//
// ZeRO-3 parameters: before_forward/before_backward(u) wait for unit u's
// all_gather (issuing it if it was not prefetched) and start the gather of
// the next unit in that direction (prefetch); after_forward/after_backward
// free unit u's full parameters (the last unit stays gathered between its
// forward and backward). Gradient buffers of ZeRO 2/3 are allocated when a
// unit's backward first needs them and freed once their reduce_scatter is
// done.
//
// Errors: communication failures propagate as braid::Error (kPeerDied,
// kTimeout, ...) from whichever call waits on them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "braid/comm.h"
#include "braid/module.h"
#include "braid/optim.h"

namespace braid {
struct Checkpoint;
namespace nn {
class Trainer;
}
}  // namespace braid

namespace braid::parallel {

struct DpOptions {
  int zero = 0;                                 // ZeRO stage 0..3
  size_t first_bucket_bytes = size_t(1) << 20;  // first bucket in grad-ready order
  size_t bucket_bytes = size_t(25) << 20;       // later buckets
  bool overlap = true;      // false: the plain scheme (ZeRO 0 only)
  // Where a full bucket's reduction runs (buckets only, i.e. overlap=true):
  //   kBackground: started from the gradient-ready hook on the
  //     communicator's worker thread, overlapping the rest of backward;
  //   kInline: run by the training thread in the hook, blocking;
  //   kAuto: kBackground when this host has a core to spare for the worker
  //     (cores > ranks on the host × compute threads), else kInline. With
  //     no spare core, overlap only time-slices one core between compute
  //     and copying, and the thread hand-offs cost (MLP dp=2 on 2 cores:
  //     6% of step time, bench/results/).
  enum class Reduce { kAuto, kBackground, kInline };
  Reduce reduce = Reduce::kAuto;
  bool bf16_grads = false;  // communicate gradients as bf16
  // ZeRO 0/1 with f32 gradients: the flat gradient buckets live in
  // Communicator::alloc_shared memory, so where every rank shares one host
  // their all_reduce reads the peers' buckets directly (the "shared"
  // algorithm: no staging copies). Elsewhere the memory is private and
  // nothing changes. false: ordinary buckets (for comparison).
  bool shared_buckets = true;
};

// Bytes of training state this rank holds.
struct DpMemory {
  int64_t param_bytes = 0;  // between steps
  int64_t grad_bytes = 0;   // between steps (ZeRO 0/1: full; 2/3: the shard)
  int64_t optim_bytes = 0;  // optimizer state
  int64_t peak_transient_bytes = 0;  // most gathered params + full grad buffers at once
  int64_t total() const { return param_bytes + grad_bytes + optim_bytes; }
};

class DataParallel {
 public:
  // `model`'s top-level children are the units (a non-Sequential model is
  // one unit). Broadcasts rank 0's parameters (blocking, collective). Throws
  // Error(kInvalidArgument) for a bad stage or overlap=false with ZeRO > 0.
  DataParallel(std::shared_ptr<Communicator> comm, nn::Module& model, DpOptions opts = {});
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  const DpOptions& options() const { return opts_; }
  // True when bucket reductions overlap backward (DpOptions::reduce, with
  // kAuto resolved for this host).
  bool background_reduce() const { return background_; }
  Communicator& comm() { return *comm_; }
  int rank() const { return rank_; }
  int world() const { return world_; }
  const std::vector<nn::Parameter*>& parameters() const { return params_; }
  size_t num_units() const { return units_.size(); }
  nn::Module& unit(size_t u) { return *units_[u]; }
  size_t num_buckets() const { return buckets_.size(); }
  // Elements (unpadded) of each bucket, in reduction order.
  std::vector<int64_t> bucket_sizes() const;

  // The grad-ready hook to put into nn::Context on the last micro-batch.
  nn::GradReadyHook hook();

  // ZeRO 0 inside the engine's own loop: sets `trainer`'s hooks so that its
  // step() fills and reduces buckets during backward (grad_ready), waits
  // for them (reduce_gradients) and sums [loss, rows, correct] across ranks
  // (reduce_sums). The trainer must have been built with this rank's
  // TrainOptions::rank/world. Throws Error(kInvalidArgument) for ZeRO > 0
  // (the sharded stages need DpTrainer's unit-by-unit loop).
  void attach(nn::Trainer& trainer);

  void begin_step();
  void before_forward(size_t u);
  void after_forward(size_t u);
  void before_backward(size_t u);
  void after_backward(size_t u);
  void finish_gradients();
  // Global L2 norm of the (reduced) gradients; scales them when it exceeds
  // max_norm > 0 (as nn::clip_grad_norm). Collective for ZeRO ≥ 1.
  double clip_grad_norm(double max_norm);
  void optimizer_step(nn::Optimizer& opt, float lr);
  // Makes every parameter's full value available in p->data (waits for
  // pending gathers; ZeRO-3 gathers every unit) — for evaluation of the
  // whole model. release_all_params() undoes it under ZeRO-3.
  void gather_all_params();
  void release_all_params();

  // Seconds the calling thread spent blocked on communication since the
  // last call (and resets the counter).
  double take_comm_wait_s();
  DpMemory memory(const nn::Optimizer& opt) const;

  // Consolidated checkpoints, the format nn::Trainer writes: full tensors
  // "model/<name>" and "optim/<name>/<slot>". add_state is collective (every
  // rank calls it; shards are gathered); only `ck` on rank 0 is complete.
  // load_state slices what this rank holds from a full checkpoint written at
  // any world size and stage (or by a single process).
  void add_state(Checkpoint& ck, const nn::Optimizer& opt);
  void load_state(const Checkpoint& ck, nn::Optimizer& opt);

 private:
  struct Bucket;
  void gather_params_async(Bucket& b);
  void wait_params(Bucket& b);
  void release_params(Bucket& b);
  void ensure_grads(Bucket& b);
  void release_grads(Bucket& b);
  void launch(Bucket& b);
  void complete(Bucket& b);
  void sum_bf16_chunk(Bucket& b);
  void wait(Work& w);
  // Runs a blocking communication call, counting its time as waiting.
  template <class F>
  void waited(F&& call);
  void poll_done();
  void point_params(Bucket& b);
  void point_grads(Bucket& b);
  void track(int64_t delta);
  std::vector<nn::Parameter*>& shard_params();

  std::shared_ptr<Communicator> comm_;
  DpOptions opts_;
  bool background_ = true;
  int rank_ = 0, world_ = 1;
  std::vector<nn::Parameter*> params_;
  std::vector<nn::Module*> units_;
  std::vector<std::unique_ptr<Bucket>> buckets_;
  std::unordered_map<const nn::Parameter*, size_t> bucket_of_;
  std::vector<std::vector<size_t>> unit_buckets_;  // buckets touching unit u
  std::vector<std::unique_ptr<nn::Parameter>> shard_params_;
  std::vector<nn::Parameter*> shard_param_ptrs_;
  double comm_wait_s_ = 0;
  int64_t transient_bytes_ = 0, peak_transient_bytes_ = 0;
  bool hook_armed_ = false;
};

}  // namespace braid::parallel
