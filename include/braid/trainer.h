// nn::Trainer — the one training step loop. Single-process training runs it as
// is; data parallelism (parallel::DataParallel) extends it through
// StepHooks; pipeline parallelism (parallel::PipelineTrainer, and the
// dp × tp × pp ParallelTrainer over it) derives from it and overrides its
// forward_backward stage with a schedule's actions over micro-batches,
// keeping every other stage — zeroing, reduction, clipping, the lr
// schedule, the update, the statistics, the step count — the loop's.
//
// One step (global batch B, this rank's shard of it, `accum` micro-batches):
//   hooks.begin_step                 serial: zero every gradient
//   forward_backward (overridable): for each micro-batch m of this rank's shard
//     gather → for each unit u: hooks.before_forward(u), forward,
//     hooks.after_forward(u) → loss (sum) → for each unit u in reverse:
//     hooks.before_backward(u), backward with dL/dlogits scaled by
//     1 / (B · targets_per_sample), hooks.after_backward(u).
//     On the LAST micro-batch ctx.grad_ready = hooks.grad_ready_hook(), so it
//     fires once per parameter per step, in the order gradients become final
//   hooks.before_optimizer_step      data parallel: gradients SUMMED across
//                                    ranks (each rank's grads are its share
//                                    of the global mean, so a sum is exact)
//   hooks.clip_grad_norm             only when TrainOptions::clip > 0
//   lr = schedule(step) → hooks.optimizer_step
//   hooks.after_step                 data parallel: SUM of [loss sum, rows,
//                                    correct] across ranks
// The units are the model's top-level modules: the children of a
// Sequential, else the model itself (running them one by one is exactly
// Sequential::forward/backward). The logged loss is the mean over the
// GLOBAL batch. Dropout keys use the sample's position in the global batch,
// so the masks are the same at any world size or micro-batch split.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "braid/data.h"
#include "braid/loss.h"
#include "braid/loss_scaler.h"
#include "braid/module.h"
#include "braid/optim.h"

namespace braid {
struct Checkpoint;
}

namespace braid::nn {

struct TrainOptions {
  int64_t global_batch = 256;  // samples per optimizer step, all ranks together
  int accum = 1;               // micro-batches per rank per step
  double clip = 0.0;           // max global grad norm; 0 = off
  uint64_t seed = 0;           // sampler order and dropout keys
  bool shuffle = true;
  int rank = 0, world = 1;     // this rank's shard of every global batch
  // Dynamic loss scaling (loss_scaler.h; fp16): dL/dlogits times the
  // scale, the global norm checked after the reduction, a non-finite step
  // skipped, the gradients divided by the scale (then clipped) otherwise.
  // Costs the norm's pass (and collective) every step, twice.
  bool loss_scaling = false;
  LossScalerOptions scaler;
};

struct StepStats {
  int64_t step = 0;         // the step just taken (from 0)
  double loss = 0;          // mean over the global batch
  float lr = 0;
  double grad_norm = 0;     // before clipping (0 when not clipping)
  int64_t correct = 0;      // argmax hits over the global batch
  int64_t rows = 0;         // loss rows over the global batch
  double loss_scale = 0;    // with loss scaling: the scale this step ran at
  bool skipped = false;     // with loss scaling: overflow, no update
};

struct EvalStats {
  double loss = 0;          // mean over rows
  double accuracy = 0;      // fraction of rows whose argmax is the target
  int64_t rows = 0;
};

// Sums over evaluated rows; stats() turns them into means.
struct EvalSums {
  double loss = 0;
  int64_t correct = 0, rows = 0;
  EvalStats stats() const;
};

// What the loop has measured of the step in progress.
struct StepState {
  int64_t step = 0;
  // This rank's [loss sum, rows, correct] until after_step makes them the
  // whole job's; StepStats are computed from them after after_step.
  double sums[3] = {0, 0, 0};
  double input_s = 0;  // seconds spent gathering input rows
};

// The extension points of one step, called in the order of the file
// comment. Every default is the single-process behaviour, so a hook set
// overrides only what its strategy changes. `params` is the model's
// parameter list. Unit indices count the model's units (see above).
class StepHooks {
 public:
  virtual ~StepHooks() = default;
  virtual void begin_step(int64_t step, const std::vector<Parameter*>& params);
  virtual void before_forward(size_t unit) { (void)unit; }
  virtual void after_forward(size_t unit) { (void)unit; }
  virtual void before_backward(size_t unit) { (void)unit; }
  virtual void after_backward(size_t unit) { (void)unit; }
  // Set as ctx.grad_ready for the last micro-batch (empty: none), so it
  // fires once per parameter when its gradient is final. Asked once per step.
  virtual GradReadyHook grad_ready_hook() { return {}; }
  // Backward is over; gradients must be final when this returns.
  virtual void before_optimizer_step(const std::vector<Parameter*>& params) { (void)params; }
  // The global gradient norm, scaling gradients when it exceeds max_norm.
  virtual double clip_grad_norm(const std::vector<Parameter*>& params, double max_norm);
  virtual void optimizer_step(Optimizer& opt, const std::vector<Parameter*>& params, float lr);
  virtual void after_step(StepState& st) { (void)st; }
};

// The built-in hook set: plain functions, each optional, over the serial
// defaults. reduce_gradients runs in before_optimizer_step, reduce_sums
// (with n = 3) in after_step.
struct TrainerHooks : StepHooks {
  GradReadyHook grad_ready;
  std::function<void(const std::vector<Parameter*>&)> reduce_gradients;
  std::function<void(double* values, int n)> reduce_sums;

  GradReadyHook grad_ready_hook() override { return grad_ready; }
  void before_optimizer_step(const std::vector<Parameter*>& params) override;
  void after_step(StepState& st) override;
};

// The model's units: the children of a non-empty Sequential, else itself.
std::vector<Module*> units_of(Module& model);

class Trainer {
 public:
  // The trainer keeps references: model, data and optimizer must outlive it.
  // Throws Error(kInvalidArgument) when this rank's share of the global
  // batch is empty or does not split into `accum` micro-batches.
  Trainer(Module& model, Dataset& data, Optimizer& opt, LrSchedule schedule, TrainOptions opts);
  virtual ~Trainer() = default;
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // The built-in hook set, in use unless set_hooks replaced it.
  TrainerHooks& hooks() { return builtin_; }
  // Runs `h` (not owned; it must outlive its use) in place of the built-in set.
  void set_hooks(StepHooks& h) { hooks_ = &h; }
  Sampler& sampler() { return sampler_; }
  // Trains and evaluates with `loss` (not owned; it must outlive its use)
  // in place of the default softmax cross-entropy.
  void set_loss(Loss& loss) { loss_ = &loss; }
  const std::vector<Parameter*>& parameters() const { return params_; }
  const TrainOptions& options() const { return opts_; }
  int64_t next_step() const { return step_; }
  // The dynamic loss scaler (meaningful when options().loss_scaling).
  // Checkpoints carry its scale and clean run (add_meta); a run that
  // resumes with loss scaling takes them back (restore_meta), one that
  // saved none (another precision) starts at the initial scale.
  const LossScaler& loss_scaler() const { return scaler_; }
  void set_next_step(int64_t s) { step_ = s; }

  // Runs step next_step() and advances. Throws what the layers and hooks throw.
  StepStats step();

  // Mean loss and accuracy of `model` over all of `data` in batches of
  // `batch` (eval mode: no dropout). Local to this process.
  EvalStats evaluate(const Dataset& data, int64_t batch);
  // The sums behind evaluate over rows [begin, end) of `data`.
  EvalSums eval_sums(const Dataset& data, int64_t batch, int64_t begin, int64_t end);

  // Model, optimizer state, step and seed (the RNG is counter-based, so
  // (seed, step) is its whole state). load throws kCorrupt on a mismatch.
  void save(const std::string& path);
  void load(const std::string& path);
  // The loop's part of a checkpoint's meta: step, seed, rng, global_batch,
  // and with loss scaling "loss_scale" and "loss_scale/good_run".
  void add_meta(Checkpoint& ck) const;
  std::map<std::string, std::string> run_meta() const;
  // Takes back from a checkpoint's meta what add_meta wrote beyond the
  // step (which resume_step reads): the loss scaler's state, when this run
  // scales and the checkpoint has one. Error(kCorrupt) for a malformed one.
  void restore_meta(const std::map<std::string, std::string>& meta);

 protected:
  // Stage 2 of step(): every micro-batch's forward, loss and backward,
  // accumulating into the gradients and into st.sums (this rank's [loss
  // sum, rows, correct]), with shard_ already this step's rows and
  // hooks_->grad_ready_hook() for the gradients' last backward. The one
  // stage a subclass replaces: a pipeline runs its schedule here
  // (parallel::PipelineTrainer); the stages around it stay the loop's.
  virtual void forward_backward(StepState& st);
  // Micro-batch m of `micro` rows into x_, y_ (timed as input).
  void load_micro_batch(StepState& st, int m, int64_t micro);
  // The model unit by unit, with the hooks around each unit.
  const Tensor& forward_units(const Tensor& x, Context& ctx);
  void backward_units(const Tensor& dy, Context& ctx);
  // The dL/dlogits scale that makes a SUM over ranks the global mean
  // (times the loss scaler's scale under loss scaling).
  float loss_scale() const;
  // Under loss scaling, after the reduction: the overflow check and the
  // unscaling (loss_scaler.h). False: skip this step's update.
  bool unscale_gradients(StepStats& out);

  Module& model_;
  Dataset& data_;
  Optimizer& opt_;
  LrSchedule schedule_;
  TrainOptions opts_;
  Sampler sampler_;
  TrainerHooks builtin_;
  StepHooks* hooks_ = &builtin_;
  std::vector<Parameter*> params_;
  std::vector<Module*> units_;
  SoftmaxCrossEntropy softmax_;
  Loss* loss_ = &softmax_;
  int64_t step_ = 0;
  LossScaler scaler_;
  std::vector<int64_t> shard_;
  Tensor x_, y_;
};

}  // namespace braid::nn
