// The one step loop; the contract and the order of the hooks are in
// include/braid/trainer.h.
#include "braid/trainer.h"

#include <algorithm>
#include <sstream>

#include "braid/checkpoint.h"
#include "braid/env.h"
#include "braid/error.h"

namespace braid::nn {

EvalStats EvalSums::stats() const {
  EvalStats ev;
  ev.rows = rows;
  ev.loss = rows ? loss / double(rows) : 0;
  ev.accuracy = rows ? double(correct) / double(rows) : 0;
  return ev;
}

void StepHooks::begin_step(int64_t step, const std::vector<Parameter*>& params) {
  (void)step;
  zero_grad(params);
}

double StepHooks::clip_grad_norm(const std::vector<Parameter*>& params, double max_norm) {
  return nn::clip_grad_norm(params, max_norm);
}

void StepHooks::optimizer_step(Optimizer& opt, const std::vector<Parameter*>& params, float lr) {
  opt.step(params, lr);
}

void TrainerHooks::before_optimizer_step(const std::vector<Parameter*>& params) {
  if (reduce_gradients) reduce_gradients(params);
}

void TrainerHooks::after_step(StepState& st) {
  if (reduce_sums) reduce_sums(st.sums, 3);
}

std::vector<Module*> units_of(Module& model) {
  std::vector<Module*> units;
  auto* seq = dynamic_cast<Sequential*>(&model);
  if (seq != nullptr && seq->size() > 0) {
    for (size_t i = 0; i < seq->size(); ++i) units.push_back(&seq->child(i));
  } else {
    units.push_back(&model);  // an empty Sequential throws its own error in forward
  }
  return units;
}

Trainer::Trainer(Module& model, Dataset& data, Optimizer& opt, LrSchedule schedule,
                 TrainOptions opts)
    : model_(model),
      data_(data),
      opt_(opt),
      schedule_(schedule),
      opts_(opts),
      sampler_(data.size(), opts.global_batch, opts.seed, opts.shuffle, opts.rank, opts.world),
      params_(model.parameters()),
      units_(units_of(model)),
      scaler_(opts.scaler) {
  int64_t local = sampler_.shard_end() - sampler_.shard_begin();
  BRAID_CHECK_ARG(local > 0, "global batch " + std::to_string(opts.global_batch) +
                                 " gives rank " + std::to_string(opts.rank) + " of " +
                                 std::to_string(opts.world) + " no samples");
  BRAID_CHECK_ARG(opts.accum >= 1 && local % opts.accum == 0,
                  "this rank's batch of " + std::to_string(local) +
                      " does not split into " + std::to_string(opts.accum) + " micro-batches");
}

StepStats Trainer::step() {
  StepHooks& h = *hooks_;
  StepState st;
  st.step = step_;
  sampler_.shard(step_, shard_);
  h.begin_step(step_, params_);
  forward_backward(st);
  h.before_optimizer_step(params_);
  StepStats out;
  out.step = step_;
  // The norm costs a pass over every gradient (and, sharded, a collective):
  // only when clipping or scaling.
  bool take = true;
  if (opts_.loss_scaling)
    take = unscale_gradients(out);
  else
    out.grad_norm = opts_.clip > 0 ? h.clip_grad_norm(params_, opts_.clip) : 0.0;
  out.lr = schedule_.at(step_);
  if (take) h.optimizer_step(opt_, params_, out.lr);
  h.after_step(st);
  out.loss = st.sums[0] / st.sums[1];
  out.rows = int64_t(st.sums[1]);
  out.correct = int64_t(st.sums[2]);
  ++step_;
  return out;
}

float Trainer::loss_scale() const {
  const double global_rows = double(opts_.global_batch) * double(data_.targets_per_sample());
  return float((opts_.loss_scaling ? scaler_.scale() : 1.0) / global_rows);
}

// The scaled gradients' global norm through the hooks (so it is the whole
// job's, and the same decision on every rank); then, when finite, the
// gradients brought to norm/S (or to the clip norm, if that is smaller) by
// the same hook's clipping: one multiply by target/(norm + 1e-6), i.e. by
// 1/S to a relative 1e-6/norm.
bool Trainer::unscale_gradients(StepStats& out) {
  const double s = scaler_.scale();
  out.loss_scale = s;
  const double scaled = hooks_->clip_grad_norm(params_, 0.0);
  if (!scaler_.update(scaled)) {
    out.skipped = true;
    out.grad_norm = scaled;
    return false;
  }
  double target = scaled / s;
  out.grad_norm = target;
  if (opts_.clip > 0 && target > opts_.clip) target = opts_.clip;
  if (target < scaled) hooks_->clip_grad_norm(params_, target);
  return true;
}

void Trainer::forward_backward(StepState& st) {
  const int64_t micro = int64_t(shard_.size()) / opts_.accum;
  const float scale = loss_scale();
  const GradReadyHook ready = hooks_->grad_ready_hook();
  Context ctx;
  ctx.training = true;
  ctx.seed = opts_.seed;
  ctx.step = step_;
  ctx.loss_scale = scale;
  for (int m = 0; m < opts_.accum; ++m) {
    load_micro_batch(st, m, micro);
    ctx.sample_offset = sampler_.shard_begin() + m * micro;
    // Gradients are final only after the last micro-batch (no_sync before).
    ctx.grad_ready = (m + 1 == opts_.accum) ? ready : GradReadyHook();
    const Tensor& logits = forward_units(x_, ctx);
    st.sums[0] += loss_->forward(logits, y_);
    st.sums[1] += double(y_.numel());
    st.sums[2] += double(loss_->correct());
    backward_units(loss_->backward(scale), ctx);
  }
}

void Trainer::load_micro_batch(StepState& st, int m, int64_t micro) {
  const double t0 = now_s();
  data_.gather(shard_.data() + m * micro, micro, x_, y_);
  st.input_s += now_s() - t0;
}

const Tensor& Trainer::forward_units(const Tensor& x, Context& ctx) {
  const Tensor* h = &x;
  for (size_t u = 0; u < units_.size(); ++u) {
    hooks_->before_forward(u);
    h = &units_[u]->forward(*h, ctx);
    hooks_->after_forward(u);
  }
  return *h;
}

void Trainer::backward_units(const Tensor& dy, Context& ctx) {
  const Tensor* g = &dy;
  for (size_t u = units_.size(); u-- > 0;) {
    hooks_->before_backward(u);
    g = &units_[u]->backward(*g, ctx);
    hooks_->after_backward(u);
  }
}

EvalSums Trainer::eval_sums(const Dataset& data, int64_t batch, int64_t begin, int64_t end) {
  BRAID_CHECK_ARG(batch > 0, "evaluation batch must be positive");
  BRAID_CHECK_ARG(0 <= begin && begin <= end && end <= data.size(),
                  "evaluation rows [" + std::to_string(begin) + ", " + std::to_string(end) +
                      ") outside a data set of " + std::to_string(data.size()));
  EvalSums sums;
  Context ctx;
  ctx.training = false;
  std::vector<int64_t> idx;
  for (int64_t s = begin; s < end; s += batch) {
    int64_t n = std::min(batch, end - s);
    idx.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) idx[size_t(i)] = s + i;
    data.gather(idx.data(), n, x_, y_);
    const Tensor& logits = model_.forward(x_, ctx);
    sums.loss += loss_->forward(logits, y_);
    sums.correct += loss_->correct();
    sums.rows += y_.numel();
  }
  return sums;
}

EvalStats Trainer::evaluate(const Dataset& data, int64_t batch) {
  return eval_sums(data, batch, 0, data.size()).stats();
}

std::map<std::string, std::string> Trainer::run_meta() const {
  std::map<std::string, std::string> m;
  m["step"] = std::to_string(step_);
  m["seed"] = std::to_string(opts_.seed);
  m["rng"] = "counter-based: (seed, step)";
  m["global_batch"] = std::to_string(opts_.global_batch);
  if (opts_.loss_scaling) {
    std::ostringstream s;
    s.precision(17);
    s << scaler_.scale();
    m["loss_scale"] = s.str();
    m["loss_scale/good_run"] = std::to_string(scaler_.good_run());
  }
  return m;
}

void Trainer::add_meta(Checkpoint& ck) const {
  for (auto& [k, v] : run_meta()) ck.meta[k] = v;
}

void Trainer::restore_meta(const std::map<std::string, std::string>& meta) {
  const auto s = meta.find("loss_scale"), g = meta.find("loss_scale/good_run");
  if (!opts_.loss_scaling || s == meta.end()) return;
  double scale = 0;
  int64_t run = 0;
  try {
    scale = std::stod(s->second);
    run = g == meta.end() ? 0 : std::stoll(g->second);
  } catch (const std::exception&) {
    throw Error(Errc::kCorrupt, "checkpoint: malformed loss_scale '" + s->second + "'");
  }
  scaler_.restore(scale, run);
}

void Trainer::save(const std::string& path) {
  Checkpoint ck;
  add_parameters(ck, params_);
  opt_.save_state(ck);
  add_meta(ck);
  save_checkpoint(path, ck);
}

void Trainer::load(const std::string& path) {
  Checkpoint ck = load_checkpoint(path);
  load_parameters(ck, params_);
  opt_.load_state(ck, params_);
  step_ = resume_step(ck, opts_.seed, path);
  restore_meta(ck.meta);
}

}  // namespace braid::nn
