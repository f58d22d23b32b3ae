// The training step of a tensor-parallel GPT, shaped as nn::Trainer's so
// that the two stay comparable line by line: the differences are the
// vocab-parallel loss, the sequence-parallel gradient sum, the sum over
// the data-parallel group, and the norm that counts each element once.
#include "braid/error.h"
#include "braid/tensor_parallel.h"

namespace braid::parallel::tp {

namespace {
int dp_rank(const std::shared_ptr<Communicator>& dp) { return dp ? dp->rank() : 0; }
int dp_size(const std::shared_ptr<Communicator>& dp) { return dp ? dp->size() : 1; }
}  // namespace

TpTrainer::TpTrainer(TpGpt& model, std::shared_ptr<Communicator> dp, nn::Dataset& data,
                     nn::Optimizer& opt, nn::LrSchedule schedule, nn::TrainOptions opts)
    : model_(model),
      dp_(std::move(dp)),
      data_(data),
      opt_(opt),
      schedule_(schedule),
      opts_(opts),
      sampler_(data.size(), opts.global_batch, opts.seed, opts.shuffle, dp_rank(dp_),
               dp_size(dp_)),
      loss_(model.tp()),
      params_(model.parameters()) {
  int64_t local = sampler_.shard_end() - sampler_.shard_begin();
  BRAID_CHECK_ARG(opts.accum >= 1 && local % opts.accum == 0,
                  "this rank's batch of " + std::to_string(local) + " does not split into " +
                      std::to_string(opts.accum) + " micro-batches");
}

nn::StepStats TpTrainer::step() {
  nn::StepStats st;
  st.step = step_;
  sampler_.shard(step_, shard_);
  const int64_t micro = int64_t(shard_.size()) / opts_.accum;
  const double global_rows = double(opts_.global_batch) * double(data_.targets_per_sample());
  const float scale = float(1.0 / global_rows);
  nn::zero_grad(params_);
  nn::Context ctx;
  ctx.training = true;
  ctx.seed = opts_.seed;
  ctx.step = step_;
  double sums[3] = {0, 0, 0};  // loss sum, rows, correct
  for (int m = 0; m < opts_.accum; ++m) {
    data_.gather(shard_.data() + m * micro, micro, x_, y_);
    ctx.sample_offset = sampler_.shard_begin() + m * micro;
    const Tensor& logits = model_.forward(x_, ctx);
    sums[0] += loss_.forward(logits, y_);
    sums[1] += double(y_.numel());
    sums[2] += double(loss_.correct());
    model_.backward(loss_.backward(scale), ctx);
  }
  model_.reduce_partial_grads();
  if (dp_size(dp_) > 1) {
    for (nn::Parameter* p : params_)
      dp_->all_reduce(p->grad.f32(), p->grad.f32(), size_t(p->size()), DType::kF32,
                      ReduceOp::kSum);
    dp_->all_reduce(sums, sums, 3, DType::kF64, ReduceOp::kSum);
  }
  st.loss = sums[0] / sums[1];
  st.rows = int64_t(sums[1]);
  st.correct = int64_t(sums[2]);
  st.grad_norm = opts_.clip > 0 ? clip_grad_norm(model_.shards(), opts_.clip, *model_.tp()) : 0.0;
  st.lr = schedule_.at(step_);
  opt_.step(params_, st.lr);
  ++step_;
  return st;
}

}  // namespace braid::parallel::tp
