// The tensor-parallel trainer: nn::Trainer's one step loop with
// TpStepHooks and the vocab-parallel loss (tensor_parallel.h).
#include "braid/tensor_parallel.h"

namespace braid::parallel::tp {

namespace {
// The trainer's options with this rank's place in the data-parallel group.
nn::TrainOptions placed(nn::TrainOptions o, const std::shared_ptr<Communicator>& dp) {
  o.rank = dp ? dp->rank() : 0;
  o.world = dp ? dp->size() : 1;
  return o;
}
}  // namespace

TpStepHooks::TpStepHooks(TpGpt& model, std::shared_ptr<Communicator> dp)
    : model_(model), dp_(std::move(dp)) {}

void TpStepHooks::before_optimizer_step(const std::vector<nn::Parameter*>& params) {
  model_.reduce_partial_grads();
  if (!data_parallel()) return;
  for (nn::Parameter* p : params)
    dp_->all_reduce(p->grad.f32(), p->grad.f32(), size_t(p->size()), DType::kF32, ReduceOp::kSum);
}

double TpStepHooks::clip_grad_norm(const std::vector<nn::Parameter*>& params, double max_norm) {
  (void)params;  // the same parameters, with their splits: model_.shards()
  return tp::clip_grad_norm(model_.shards(), max_norm, *model_.tp());
}

void TpStepHooks::after_step(nn::StepState& st) {
  if (data_parallel()) dp_->all_reduce(st.sums, st.sums, 3, DType::kF64, ReduceOp::kSum);
}

TpTrainer::TpTrainer(TpGpt& model, std::shared_ptr<Communicator> dp, nn::Dataset& data,
                     nn::Optimizer& opt, nn::LrSchedule schedule, nn::TrainOptions opts)
    : hooks_(model, dp),
      loss_(model.tp()),
      trainer_(model, data, opt, schedule, placed(opts, dp)) {
  trainer_.set_hooks(hooks_);
  trainer_.set_loss(loss_);
}

}  // namespace braid::parallel::tp
