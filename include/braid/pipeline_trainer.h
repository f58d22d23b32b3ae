// Pipeline parallelism in nn::Trainer's one step loop: PipelineTrainer runs
// a PipelineExecutor's schedule as the loop's forward/backward stage, and
// PipelineHooks adds the stages that span the pipeline's ranks (the global
// gradient norm, the loss sums).
#pragma once

#include <cstdint>
#include <vector>

#include "braid/optim.h"
#include "braid/pipeline_executor.h"
#include "braid/trainer.h"

namespace braid::parallel {

// The step hooks of a pipeline: `inner`'s (the built-in serial set, or
// DataParallel's over copies of the pipeline) with the two stages that
// span the pipeline's ranks: clip_grad_norm uses the global norm over
// every stage (nn::clip_global_norm over norm_pieces, summed by
// sum_over_ranks, collective over the pipeline's ranks),
// and after_step sums [loss sum, rows, correct] over them (only the last
// stage's rank has any) before `inner`'s after_step.
class PipelineHooks : public nn::StepHooks {
 public:
  // Over `exec`'s ranks; times the schedule's reduce-gradients and
  // optimizer-step actions (exec.loop_timing) around `inner`'s stages.
  PipelineHooks(PipelineExecutor& exec, nn::StepHooks& inner) : exec_(exec), inner_(&inner) {}
  void set_inner(nn::StepHooks& inner) { inner_ = &inner; }

  void begin_step(int64_t step, const std::vector<nn::Parameter*>& params) override;
  nn::GradReadyHook grad_ready_hook() override { return inner_->grad_ready_hook(); }
  void before_optimizer_step(const std::vector<nn::Parameter*>& params) override;
  // Scales gradients by max_norm / (norm + 1e-6) when the norm exceeds
  // max_norm, as nn::clip_grad_norm does in one process.
  double clip_grad_norm(const std::vector<nn::Parameter*>& params, double max_norm) override;
  void optimizer_step(nn::Optimizer& opt, const std::vector<nn::Parameter*>& params,
                      float lr) override;
  void after_step(nn::StepState& st) override;

 protected:
  // What this rank adds to the global norm, and how the ranks' sums meet:
  // here every gradient of this rank's stages, summed over the pipeline's
  // ranks (stages hold disjoint parameters). Collective over those ranks.
  virtual std::vector<nn::GradPiece> norm_pieces(const std::vector<nn::Parameter*>& params);
  virtual void sum_over_ranks(double& square_sum);
  PipelineExecutor& exec_;
  nn::StepHooks* inner_;
};

// nn::Trainer with the executor's schedule as its forward/backward stage:
// each step this rank's shard of the global batch (TrainOptions::rank and
// world: this pipeline copy among the copies) is gathered whole and run
// through `exec` with the trainer's loss, seed and loss scale, and the
// grad-ready hook of the hooks in use. Its parameters are the executor's
// (this rank's stages); its hooks a PipelineHooks over the built-in set
// (hooks()), so TrainOptions::clip clips by the norm over all stages and
// StepStats are the whole pipeline's. `model` is what the executor runs
// this rank's chunks of (the whole model, or this rank's stages);
// TrainOptions::accum rounds each run the whole schedule over 1/accum of
// the shard (which the schedule's micro-batches then split), adding to
// the gradients, as nn::Trainer's accumulation does. save/load are nn::Trainer's over this rank's parameters only.
class PipelineTrainer : public nn::Trainer {
 public:
  PipelineTrainer(PipelineExecutor& exec, nn::Module& model, nn::Dataset& data,
                  nn::Optimizer& opt, nn::LrSchedule schedule, nn::TrainOptions opts);
  PipelineHooks& pipeline_hooks() { return pipe_hooks_; }

 protected:
  void forward_backward(nn::StepState& st) override;

 private:
  PipelineExecutor& exec_;
  PipelineHooks pipe_hooks_;
};

}  // namespace braid::parallel
