// parallel::DpTrainer — nn::Trainer's step loop, data parallel: one
// nn::Trainer whose hooks are a DataParallel, plus the collective versions
// of evaluation and checkpoints.
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
// Each step ends with DataParallel's exchange of every rank's [loss sum,
// rows, correct, compute_s, exposed_comm_s, idle_s] (data_parallel.h), so
// every rank returns the loss over the whole global batch and knows every
// rank's time split (rank_times()).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "braid/data_parallel.h"
#include "braid/trainer.h"

namespace braid::parallel {

// Collective: every rank's evaluation sums added up (one all_reduce), as
// the whole data set's mean loss and accuracy.
nn::EvalStats all_reduce_eval(Communicator& comm, const nn::EvalSums& mine);

class DpTrainer {
 public:
  // Keeps references: model, data and optimizer must outlive it.
  // TrainOptions::rank/world are replaced by the communicator's. Throws
  // what DataParallel and nn::Trainer throw for bad options.
  DpTrainer(std::shared_ptr<Communicator> comm, nn::Module& model, nn::Dataset& data,
            nn::Optimizer& opt, nn::LrSchedule schedule, nn::TrainOptions opts,
            DpOptions dp = {});

  // Collective. Runs step next_step() and advances; StepStats are global.
  nn::StepStats step() { return trainer_.step(); }
  // Every rank's time split of the last step (index = rank).
  const std::vector<DpStepTimes>& rank_times() const { return dp_.rank_times(); }

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
  nn::Trainer& trainer() { return trainer_; }
  const nn::TrainOptions& options() const { return trainer_.options(); }
  int64_t next_step() const { return trainer_.next_step(); }
  void set_next_step(int64_t s) { trainer_.set_next_step(s); }
  DpMemory memory() const { return dp_.memory(opt_); }

 private:
  std::shared_ptr<Communicator> comm_;
  nn::Optimizer& opt_;
  DataParallel dp_;
  nn::Trainer trainer_;
};

}  // namespace braid::parallel
