// The pipeline in nn::Trainer's one step loop: PipelineTrainer runs the
// executor's schedule as the loop's forward/backward stage; PipelineHooks
// adds the two stages that span the pipeline's ranks (pipeline.h).

#include "braid/comm.h"
#include "braid/env.h"
#include "braid/error.h"
#include "braid/kernels.h"
#include "braid/pipeline_trainer.h"

namespace braid::parallel {

void PipelineHooks::begin_step(int64_t step, const std::vector<nn::Parameter*>& params) {
  inner_->begin_step(step, params);
}

void PipelineHooks::before_optimizer_step(const std::vector<nn::Parameter*>& params) {
  ActionTiming& t = exec_.loop_timing(ActionKind::kReduceGrads);
  t.start = now_s();
  inner_->before_optimizer_step(params);
  t.end = now_s();
}

std::vector<nn::GradPiece> PipelineHooks::norm_pieces(const std::vector<nn::Parameter*>& params) {
  std::vector<nn::GradPiece> pieces;
  for (nn::Parameter* p : params) pieces.push_back({p->grad.f32(), p->size()});
  return pieces;
}

void PipelineHooks::sum_over_ranks(double& square_sum) {
  exec_.comm().all_reduce(&square_sum, &square_sum, 1, DType::kF64, ReduceOp::kSum);
}

double PipelineHooks::clip_grad_norm(const std::vector<nn::Parameter*>& params,
                                     double max_norm) {
  return nn::clip_global_norm(norm_pieces(params), max_norm,
                              [this](double& ss) { sum_over_ranks(ss); });
}

void PipelineHooks::optimizer_step(nn::Optimizer& opt, const std::vector<nn::Parameter*>& params,
                                   float lr) {
  ActionTiming& t = exec_.loop_timing(ActionKind::kStep);
  t.start = now_s();
  inner_->optimizer_step(opt, params, lr);
  t.end = now_s();
}

void PipelineHooks::after_step(nn::StepState& st) {
  exec_.comm().all_reduce(st.sums, st.sums, 3, DType::kF64, ReduceOp::kSum);
  inner_->after_step(st);
}

PipelineTrainer::PipelineTrainer(PipelineExecutor& exec, nn::Module& model, nn::Dataset& data,
                                 nn::Optimizer& opt, nn::LrSchedule schedule,
                                 nn::TrainOptions opts)
    : nn::Trainer(model, data, opt, schedule, opts), exec_(exec), pipe_hooks_(exec, hooks()) {
  params_ = exec.parameters();
  set_hooks(pipe_hooks_);
}

void PipelineTrainer::forward_backward(nn::StepState& st) {
  // Accumulation rounds run the whole schedule one after another, each
  // over its share of the shard (the schedule's micro-batches split that),
  // as nn::Trainer runs its micro-batches: gradients add up, and they are
  // final, so grad-ready fires, only in the last round.
  const int64_t rows = int64_t(shard_.size()) / opts_.accum;
  for (int k = 0; k < opts_.accum; ++k) {
    load_micro_batch(st, k, rows);
    PipelineStep ps;
    ps.step = step_;
    ps.seed = opts_.seed;
    ps.round = k;
    ps.first_row = sampler_.shard_begin() + k * rows;
    ps.scale = loss_scale();
    ps.loss = loss_;
    if (k + 1 == opts_.accum) ps.grad_ready = hooks_->grad_ready_hook();
    exec_.run(x_, y_, ps, st.sums);
  }
}

}  // namespace braid::parallel
