// parallel::DpTrainer — nn::Trainer's step, data parallel.
//
// Every rank constructs one with the same model (same seed), data,
// optimizer, schedule and TrainOptions; rank and world come from the
// communicator. Step s takes global batch s from the sampler, this rank its
// contiguous share [r·B/w, (r+1)·B/w) (so the union over ranks is exactly
// the serial batch), split into `accum` micro-batches; the gradient of the
// dL/dlogits scale 1/(B · targets_per_sample) makes the SUM over ranks the
// serial mean gradient. Gradients are reduced only on the last micro-batch
// (no_sync on the others). Then: clip by the global norm, lr = schedule(s),
// optimizer step (sharded under ZeRO ≥ 1). The result equals
// single-process nn::Trainer up to floating-point reassociation.
//
// Each step ends with one small all_gather that exchanges [loss sum, rows,
// correct, compute_s, exposed_comm_s, idle_s] of every rank, so every rank
// returns the loss over the whole global batch and knows every rank's time
// split (rank_times()):
//   compute_s       forward, loss, backward, clipping and the optimizer
//   exposed_comm_s  blocked waiting for communication (bucket reductions,
//                   parameter gathers, the norm and this exchange — the
//                   exchange of step s is counted in step s+1)
//   idle_s          the rest: input pipeline (gathering the batch) and
//                   bookkeeping
// Test hook: BRAID_DP_KILL="RANK:STEP" makes that rank SIGKILL itself in the
// middle of that step (after forward, before backward).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "braid/data_parallel.h"
#include "braid/trainer.h"

namespace braid::parallel {

struct DpStepTimes {
  double compute_s = 0, exposed_comm_s = 0, idle_s = 0;
  double step_s() const { return compute_s + exposed_comm_s + idle_s; }
};

class DpTrainer {
 public:
  // Keeps references: model, data and optimizer must outlive it.
  // TrainOptions::rank/world are replaced by the communicator's.
  DpTrainer(std::shared_ptr<Communicator> comm, nn::Module& model, nn::Dataset& data,
            nn::Optimizer& opt, nn::LrSchedule schedule, nn::TrainOptions opts,
            DpOptions dp = {});

  // Collective. Runs step next_step() and advances; StepStats are global.
  nn::StepStats step();
  // Every rank's time split of the last step (index = rank).
  const std::vector<DpStepTimes>& rank_times() const { return times_; }

  // Collective: mean loss and accuracy over all of `data`, each rank
  // evaluating a contiguous 1/world of it.
  nn::EvalStats evaluate(const nn::Dataset& data, int64_t batch);

  // Collective. save: rank 0 writes a consolidated checkpoint (the format
  // of nn::Trainer::save, loadable by it and by any DpTrainer). load: every
  // rank reads `path` (written at any world size / stage) and takes its
  // share. load throws like nn::Trainer::load.
  void save(const std::string& path);
  void load(const std::string& path);

  DataParallel& dp() { return dp_; }
  const nn::TrainOptions& options() const { return opts_; }
  int64_t next_step() const { return step_; }
  void set_next_step(int64_t s) { step_ = s; }
  DpMemory memory() const { return dp_.memory(opt_); }

 private:
  void forward_backward(bool last);
  std::shared_ptr<Communicator> comm_;
  nn::Module& model_;
  nn::Dataset& data_;
  nn::Optimizer& opt_;
  nn::LrSchedule schedule_;
  nn::TrainOptions opts_;
  DataParallel dp_;
  nn::Sampler sampler_;
  nn::SoftmaxCrossEntropy loss_;
  std::vector<int64_t> shard_;
  Tensor x_, y_;
  int64_t step_ = 0;
  std::vector<DpStepTimes> times_;
  double carried_comm_s_ = 0;
  int kill_rank_ = -1;
  int64_t kill_step_ = -1;
};

}  // namespace braid::parallel
