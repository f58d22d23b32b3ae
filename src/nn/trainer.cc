#include "braid/trainer.h"

#include "braid/checkpoint.h"
#include "braid/error.h"

namespace braid::nn {

Trainer::Trainer(Module& model, Dataset& data, Optimizer& opt, LrSchedule schedule,
                 TrainOptions opts)
    : model_(model),
      data_(data),
      opt_(opt),
      schedule_(schedule),
      opts_(opts),
      sampler_(data.size(), opts.global_batch, opts.seed, opts.shuffle, opts.rank, opts.world),
      params_(model.parameters()) {
  int64_t local = sampler_.shard_end() - sampler_.shard_begin();
  BRAID_CHECK_ARG(opts.accum >= 1 && local % opts.accum == 0,
                  "this rank's batch of " + std::to_string(local) +
                      " does not split into " + std::to_string(opts.accum) + " micro-batches");
}

StepStats Trainer::step() {
  StepStats st;
  st.step = step_;
  sampler_.shard(step_, shard_);
  const int64_t local = int64_t(shard_.size());
  const int64_t micro = local / opts_.accum;
  const double global_rows = double(opts_.global_batch) * double(data_.targets_per_sample());
  const float scale = float(1.0 / global_rows);
  zero_grad(params_);
  Context ctx;
  ctx.training = true;
  ctx.seed = opts_.seed;
  ctx.step = step_;
  double sums[3] = {0, 0, 0};  // loss sum, rows, correct
  for (int m = 0; m < opts_.accum; ++m) {
    data_.gather(shard_.data() + m * micro, micro, x_, y_);
    ctx.sample_offset = sampler_.shard_begin() + m * micro;
    ctx.grad_ready = (m + 1 == opts_.accum) ? hooks_.grad_ready : GradReadyHook();
    const Tensor& logits = model_.forward(x_, ctx);
    sums[0] += loss_.forward(logits, y_);
    sums[1] += double(y_.numel());
    sums[2] += double(loss_.correct());
    model_.backward(loss_.backward(scale), ctx);
  }
  if (hooks_.reduce_gradients) hooks_.reduce_gradients(params_);
  if (hooks_.reduce_sums) hooks_.reduce_sums(sums, 3);
  st.loss = sums[0] / sums[1];
  st.rows = int64_t(sums[1]);
  st.correct = int64_t(sums[2]);
  // The norm costs a pass over every gradient: only when clipping.
  st.grad_norm = opts_.clip > 0 ? clip_grad_norm(params_, opts_.clip) : 0.0;
  st.lr = schedule_.at(step_);
  opt_.step(params_, st.lr);
  ++step_;
  return st;
}

EvalStats Trainer::evaluate(const Dataset& data, int64_t batch) {
  BRAID_CHECK_ARG(batch > 0, "evaluation batch must be positive");
  EvalStats ev;
  Context ctx;
  ctx.training = false;
  std::vector<int64_t> idx;
  double loss = 0;
  int64_t correct = 0;
  for (int64_t s = 0; s < data.size(); s += batch) {
    int64_t n = std::min(batch, data.size() - s);
    idx.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) idx[size_t(i)] = s + i;
    data.gather(idx.data(), n, x_, y_);
    const Tensor& logits = model_.forward(x_, ctx);
    loss += loss_.forward(logits, y_);
    correct += loss_.correct();
    ev.rows += y_.numel();
  }
  ev.loss = ev.rows ? loss / double(ev.rows) : 0;
  ev.accuracy = ev.rows ? double(correct) / double(ev.rows) : 0;
  return ev;
}

void Trainer::save(const std::string& path) {
  Checkpoint ck;
  add_parameters(ck, params_);
  opt_.save_state(ck);
  ck.meta["step"] = std::to_string(step_);
  ck.meta["seed"] = std::to_string(opts_.seed);
  ck.meta["rng"] = "counter-based: (seed, step)";
  ck.meta["global_batch"] = std::to_string(opts_.global_batch);
  save_checkpoint(path, ck);
}

void Trainer::load(const std::string& path) {
  Checkpoint ck = load_checkpoint(path);
  load_parameters(ck, params_);
  opt_.load_state(ck, params_);
  step_ = resume_step(ck, opts_.seed, path);
}

}  // namespace braid::nn
