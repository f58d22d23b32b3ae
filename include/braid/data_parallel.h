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
// One optimizer step. DataParallel is the nn::StepHooks of nn::Trainer's
// loop (attach, or DpTrainer, which does that for you); each stage is the
// ZeRO stage's policy (src/parallel/dp/zero_policy.h):
//   begin_step             buckets reset (replicated gradients zeroed)
//   for each micro-batch:  before_forward(u) / after_forward(u) around each
//                          unit's forward, before_backward(u) /
//                          after_backward(u) around its backward; the
//                          grad-ready hook on the LAST micro-batch only
//                          (no_sync for the others) starts bucket reductions
//   before_optimizer_step  waits for the reductions (the "exposed" part)
//   clip_grad_norm         global norm (across chunks when sharded)
//   optimizer_step         all parameters (ZeRO 0) or this rank's chunk
//                          (ZeRO ≥ 1), then starts the all_gather of
//                          updated parameters (ZeRO 1/2; waited for lazily
//                          by before_forward; ZeRO 3 prefetches unit 0)
//   after_step             one all_gather of every rank's [loss sum, rows,
//                          correct, compute_s, exposed_comm_s, idle_s]: the
//                          step's sums become the global batch's and
//                          rank_times() every rank's time split
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
// Time split (rank_times, per step):
//   compute_s       forward, loss, backward, clipping and the optimizer
//   exposed_comm_s  blocked waiting for communication (bucket reductions,
//                   parameter gathers, the norm and the after_step
//                   exchange — the exchange of step s is counted in s+1)
//   idle_s          the rest: input pipeline (gathering the batch) and
//                   bookkeeping
//
// Test hook: BRAID_DP_KILL="RANK:STEP" makes that rank SIGKILL itself in the
// middle of that step (after forward, before backward).
//
// Errors: communication failures propagate as braid::Error (kPeerDied,
// kTimeout, ...) from whichever call waits on them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "braid/comm.h"
#include "braid/module.h"
#include "braid/optim.h"
#include "braid/trainer.h"

namespace braid {
struct Checkpoint;
}  // namespace braid

namespace braid::parallel::dp {
struct State;
class ZeroPolicy;
}  // namespace braid::parallel::dp

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
  // Expert parallelism (expert_parallel.h; ZeRO 0 with f32 gradients
  // only): the parameters `expert_param` picks belong to experts that only
  // some ranks of the group hold. They get buckets of their own (private
  // memory), summed over `expert_dp` (the ranks that hold the same
  // experts) instead of the group, broadcast from expert_dp's rank 0 at
  // construction; the clipping norm counts every other parameter on
  // expert_ep's rank 0 only and sums over `expert_ep`, so each expert
  // counts once. Empty: no experts.
  std::function<bool(const nn::Parameter&)> expert_param;
  std::shared_ptr<Communicator> expert_dp, expert_ep;
};

// Bytes of training state this rank holds.
struct DpMemory {
  int64_t param_bytes = 0;  // between steps
  int64_t grad_bytes = 0;   // between steps (ZeRO 0/1: full; 2/3: the shard)
  int64_t optim_bytes = 0;  // optimizer state
  int64_t peak_transient_bytes = 0;  // most gathered params + full grad buffers at once
  int64_t total() const { return param_bytes + grad_bytes + optim_bytes; }
};

struct DpStepTimes {
  double compute_s = 0, exposed_comm_s = 0, idle_s = 0;
  double step_s() const { return compute_s + exposed_comm_s + idle_s; }
};

class DataParallel : public nn::StepHooks {
 public:
  // `model`'s units are nn::units_of(model) (the children of a Sequential).
  // Broadcasts rank 0's parameters (blocking, collective). Throws
  // Error(kInvalidArgument) for a bad stage or overlap=false with ZeRO > 0.
  DataParallel(std::shared_ptr<Communicator> comm, nn::Module& model, DpOptions opts = {});
  ~DataParallel() override;
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  const DpOptions& options() const;
  // True when bucket reductions overlap backward (DpOptions::reduce, with
  // kAuto resolved for this host).
  bool background_reduce() const;
  // True when every gradient bucket lies in alloc_shared memory that all
  // ranks map, so its all_reduce is the "shared" one (ZeRO 0/1, f32
  // gradients, DpOptions::shared_buckets, several ranks all on shared
  // memory); false when the buckets are private.
  bool shared_buckets() const;
  Communicator& comm();
  int rank() const;
  int world() const;
  const std::vector<nn::Parameter*>& parameters() const;
  size_t num_units() const;
  nn::Module& unit(size_t u);
  size_t num_buckets() const;
  // Elements (unpadded) of each bucket, in reduction order.
  std::vector<int64_t> bucket_sizes() const;

  // The grad-ready hook to put into nn::Context on the last micro-batch.
  nn::GradReadyHook hook();

  // Makes this object `trainer`'s hooks, at any ZeRO stage. The trainer
  // must train this model and have been built with this rank's
  // TrainOptions::rank/world (else Error(kInvalidArgument)). Checkpoints of
  // a sharded stage go through add_state/load_state (DpTrainer::save/load),
  // not nn::Trainer's.
  void attach(nn::Trainer& trainer);

  // nn::StepHooks: the stages of one step, in the order above. The
  // parameter lists passed in are ignored: DataParallel knows its own.
  void begin_step(int64_t step, const std::vector<nn::Parameter*>& params) override;
  void before_forward(size_t u) override;
  void after_forward(size_t u) override;
  void before_backward(size_t u) override;
  void after_backward(size_t u) override;
  nn::GradReadyHook grad_ready_hook() override { return hook(); }
  void before_optimizer_step(const std::vector<nn::Parameter*>& params) override;
  // Collective for ZeRO ≥ 1.
  double clip_grad_norm(const std::vector<nn::Parameter*>& params, double max_norm) override;
  void optimizer_step(nn::Optimizer& opt, const std::vector<nn::Parameter*>& params,
                      float lr) override;
  // Collective: the exchange described above.
  void after_step(nn::StepState& st) override;

  // Every rank's time split of the last step (index = rank).
  const std::vector<DpStepTimes>& rank_times() const { return times_; }

  // Makes every parameter's full value available in p->data (waits for
  // pending gathers; ZeRO-3 gathers every unit) — for evaluation of the
  // whole model. release_all_params() undoes it under ZeRO-3.
  void gather_all_params();
  void release_all_params();

  // Bytes of training state this rank holds (params and grads from the
  // stage's layout, optimizer state from `opt`).
  DpMemory memory(const nn::Optimizer& opt) const;
  // The same without the optimizer (optim_bytes 0): parameters and
  // gradients as the stage lays them out.
  DpMemory memory() const;

  // Consolidated checkpoints, the format nn::Trainer writes: full tensors
  // "model/<name>" and "optim/<name>/<slot>". add_state is collective (every
  // rank calls it; shards are gathered); only `ck` on rank 0 is complete.
  // load_state slices what this rank holds from a full checkpoint written at
  // any world size and stage (or by a single process).
  void add_state(Checkpoint& ck, const nn::Optimizer& opt);
  void load_state(const Checkpoint& ck, nn::Optimizer& opt);

 private:
  std::unique_ptr<dp::State> s_;
  std::unique_ptr<dp::ZeroPolicy> policy_;
  std::vector<DpStepTimes> times_;
  double step_start_s_ = 0, carried_comm_s_ = 0;
  int64_t step_ = 0;
  int kill_rank_ = -1;
  int64_t kill_step_ = -1;
};

}  // namespace braid::parallel
