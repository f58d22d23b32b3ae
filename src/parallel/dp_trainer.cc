// DpTrainer: the step of nn::Trainer, driven unit by unit so that
// DataParallel can gather (ZeRO-3) and reduce around each unit.
#include "braid/dp_trainer.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "braid/checkpoint.h"
#include "braid/env.h"
#include "braid/error.h"

namespace braid::parallel {

namespace {
nn::TrainOptions placed(nn::TrainOptions o, const Communicator& c) {
  o.rank = const_cast<Communicator&>(c).rank();
  o.world = const_cast<Communicator&>(c).size();
  return o;
}
}  // namespace

DpTrainer::DpTrainer(std::shared_ptr<Communicator> comm, nn::Module& model, nn::Dataset& data,
                     nn::Optimizer& opt, nn::LrSchedule schedule, nn::TrainOptions opts,
                     DpOptions dp)
    : comm_(comm),
      model_(model),
      data_(data),
      opt_(opt),
      schedule_(schedule),
      opts_(placed(opts, *comm)),
      dp_(comm, model, dp),
      sampler_(data.size(), opts_.global_batch, opts_.seed, opts_.shuffle, opts_.rank,
               opts_.world) {
  int64_t local = sampler_.shard_end() - sampler_.shard_begin();
  BRAID_CHECK_ARG(local > 0, "global batch " + std::to_string(opts_.global_batch) +
                                 " gives rank " + std::to_string(opts_.rank) + " of " +
                                 std::to_string(opts_.world) + " no samples");
  BRAID_CHECK_ARG(opts_.accum >= 1 && local % opts_.accum == 0,
                  "this rank's batch of " + std::to_string(local) + " does not split into " +
                      std::to_string(opts_.accum) + " micro-batches");
  if (auto k = env_str("BRAID_DP_KILL")) {
    auto colon = k->find(':');
    if (colon != std::string::npos) {
      kill_rank_ = std::atoi(k->substr(0, colon).c_str());
      kill_step_ = std::atoll(k->substr(colon + 1).c_str());
    }
  }
  times_.resize(size_t(opts_.world));
}

nn::StepStats DpTrainer::step() {
  const double t_start = now_s();
  double t_idle = 0;
  nn::StepStats st;
  st.step = step_;
  sampler_.shard(step_, shard_);
  const int64_t micro = int64_t(shard_.size()) / opts_.accum;
  const float scale =
      float(1.0 / (double(opts_.global_batch) * double(data_.targets_per_sample())));
  const size_t nu = dp_.num_units();
  dp_.begin_step();
  nn::Context ctx;
  ctx.training = true;
  ctx.seed = opts_.seed;
  ctx.step = step_;
  double sums[3] = {0, 0, 0};  // loss sum, rows, correct
  for (int m = 0; m < opts_.accum; ++m) {
    const bool last = m + 1 == opts_.accum;
    double t0 = now_s();
    data_.gather(shard_.data() + m * micro, micro, x_, y_);
    t_idle += now_s() - t0;
    ctx.sample_offset = sampler_.shard_begin() + m * micro;
    ctx.grad_ready = last ? dp_.hook() : nn::GradReadyHook();  // no_sync before the last
    const Tensor* h = &x_;
    for (size_t u = 0; u < nu; ++u) {
      dp_.before_forward(u);
      h = &dp_.unit(u).forward(*h, ctx);
      dp_.after_forward(u);
    }
    sums[0] += loss_.forward(*h, y_);
    sums[1] += double(y_.numel());
    sums[2] += double(loss_.correct());
    if (step_ == kill_step_ && opts_.rank == kill_rank_) ::kill(::getpid(), SIGKILL);
    const Tensor* g = &loss_.backward(scale);
    for (size_t u = nu; u-- > 0;) {
      dp_.before_backward(u);
      g = &dp_.unit(u).backward(*g, ctx);
      dp_.after_backward(u);
    }
  }
  dp_.finish_gradients();
  // As nn::Trainer: the norm (a pass over every gradient and, sharded, an
  // all_reduce) only when clipping needs it.
  st.grad_norm = opts_.clip > 0 ? dp_.clip_grad_norm(opts_.clip) : 0.0;
  st.lr = schedule_.at(step_);
  dp_.optimizer_step(opt_, st.lr);

  const double comm_s = dp_.take_comm_wait_s() + carried_comm_s_;
  const double wall = now_s() - t_start;
  double mine[6] = {sums[0], sums[1], sums[2], std::max(0.0, wall - comm_s - t_idle), comm_s,
                    t_idle};
  std::vector<double> all(6 * size_t(opts_.world));
  double t0 = now_s();
  if (opts_.world > 1)
    comm_->all_gather(mine, all.data(), 6, DType::kF64);
  else
    std::copy(mine, mine + 6, all.begin());
  carried_comm_s_ = now_s() - t0;
  double tot[3] = {0, 0, 0};
  for (int r = 0; r < opts_.world; ++r) {
    const double* v = all.data() + 6 * r;
    for (int i = 0; i < 3; ++i) tot[i] += v[i];
    times_[size_t(r)] = {v[3], v[4], v[5]};
  }
  st.loss = tot[0] / tot[1];
  st.rows = int64_t(tot[1]);
  st.correct = int64_t(tot[2]);
  ++step_;
  return st;
}

nn::EvalStats DpTrainer::evaluate(const nn::Dataset& data, int64_t batch) {
  BRAID_CHECK_ARG(batch > 0, "evaluation batch must be positive");
  dp_.gather_all_params();
  nn::Context ctx;
  ctx.training = false;
  const int64_t n = data.size(), w = opts_.world, r = opts_.rank;
  const int64_t begin = r * n / w, end = (r + 1) * n / w;
  std::vector<int64_t> idx;
  double v[3] = {0, 0, 0};  // loss sum, correct, rows
  for (int64_t s = begin; s < end; s += batch) {
    int64_t k = std::min(batch, end - s);
    idx.resize(size_t(k));
    for (int64_t i = 0; i < k; ++i) idx[size_t(i)] = s + i;
    data.gather(idx.data(), k, x_, y_);
    const Tensor& logits = model_.forward(x_, ctx);
    v[0] += loss_.forward(logits, y_);
    v[1] += double(loss_.correct());
    v[2] += double(y_.numel());
  }
  dp_.release_all_params();
  comm_->all_reduce(v, v, 3, DType::kF64, ReduceOp::kSum);
  nn::EvalStats ev;
  ev.rows = int64_t(v[2]);
  ev.loss = v[2] > 0 ? v[0] / v[2] : 0;
  ev.accuracy = v[2] > 0 ? v[1] / v[2] : 0;
  return ev;
}

void DpTrainer::save(const std::string& path) {
  Checkpoint ck;
  dp_.add_state(ck, opt_);
  ck.meta["step"] = std::to_string(step_);
  ck.meta["seed"] = std::to_string(opts_.seed);
  ck.meta["rng"] = "counter-based: (seed, step)";
  ck.meta["global_batch"] = std::to_string(opts_.global_batch);
  ck.meta["dp/world"] = std::to_string(opts_.world);
  ck.meta["dp/zero"] = std::to_string(dp_.options().zero);
  if (opts_.rank == 0) save_checkpoint(path, ck);
  comm_->barrier();  // the file exists for everyone once save returns
}

void DpTrainer::load(const std::string& path) {
  Checkpoint ck = load_checkpoint(path);
  const int64_t step = resume_step(ck, opts_.seed, path);  // checks before loading any state
  dp_.load_state(ck, opt_);
  step_ = step;
}

}  // namespace braid::parallel
