// DataParallel: the step loop's hooks, each handed to the ZeRO policy or to
// the stage-free mechanics in State. The contract is in
// include/braid/data_parallel.h; the layout is built in layout.cc.
#include "braid/data_parallel.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "braid/checkpoint.h"
#include "braid/env.h"
#include "braid/error.h"
#include "braid/threads.h"
#include "parallel/dp/layout.h"
#include "parallel/dp/state.h"
#include "parallel/dp/zero_policy.h"

namespace braid::parallel {

DataParallel::DataParallel(std::shared_ptr<Communicator> comm, nn::Module& model, DpOptions opts)
    : s_(std::make_unique<dp::State>()) {
  BRAID_CHECK_ARG(comm != nullptr, "DataParallel: null communicator");
  BRAID_CHECK_ARG(opts.bucket_bytes >= 4 && opts.first_bucket_bytes >= 4,
                  "DataParallel: bucket sizes must be at least one element");
  s_->comm = std::move(comm);
  s_->opts = opts;
  policy_ = dp::ZeroPolicy::make(*s_);
  s_->policy = policy_.get();
  s_->rank = s_->comm->rank();
  s_->world = s_->comm->size();
  s_->background = opts.reduce == DpOptions::Reduce::kBackground ||
                   (opts.reduce == DpOptions::Reduce::kAuto &&
                    usable_cores() > s_->comm->host_size() * num_threads());
  dp::lay_out(*s_, *policy_, model);
  times_.resize(size_t(s_->world));
  // The fault fires once: not again when braid run --max-restarts has
  // restarted the job.
  auto k = env_str("BRAID_DP_KILL");
  if (k && env_int("BRAID_RESTART_COUNT", 0) == 0) {
    auto colon = k->find(':');
    if (colon != std::string::npos) {
      kill_rank_ = std::atoi(k->substr(0, colon).c_str());
      kill_step_ = std::atoll(k->substr(colon + 1).c_str());
    }
  }
}

DataParallel::~DataParallel() {
  // Async work may still reference our buffers (after an error, say): let it
  // end before they are freed. Errors here were already reported.
  for (auto& b : s_->buckets) {
    for (Work* w : {&b->reduce_work, &b->gather_work, &b->gather16_work}) {
      if (!w->valid()) continue;
      try {
        w->wait();
      } catch (...) {
      }
    }
  }
  // The model outlives this object: every parameter and gradient that is a
  // view into a bucket gets memory of its own with the same values, so that
  // nothing points into the buckets freed next. (Sharded parameters are
  // released between uses: those stay empty.)
  for (auto& b : s_->buckets)
    for (nn::Parameter* p : b->params) {
      if (!p->data.empty()) p->data = Tensor(p->data);
      if (!p->grad.empty()) p->grad = Tensor(p->grad);
    }
}

const DpOptions& DataParallel::options() const { return s_->opts; }
bool DataParallel::background_reduce() const { return s_->background; }
Communicator& DataParallel::comm() { return *s_->comm; }
int DataParallel::rank() const { return s_->rank; }
int DataParallel::world() const { return s_->world; }
const std::vector<nn::Parameter*>& DataParallel::parameters() const { return s_->params; }
size_t DataParallel::num_units() const { return s_->units.size(); }
nn::Module& DataParallel::unit(size_t u) { return *s_->units.at(u); }
size_t DataParallel::num_buckets() const { return s_->buckets.size(); }

bool DataParallel::shared_buckets() const {
  bool all = !s_->buckets.empty();
  for (auto& b : s_->buckets) all = all && b->grad_mem.shared();
  return all;
}

std::vector<int64_t> DataParallel::bucket_sizes() const {
  std::vector<int64_t> v;
  for (auto& b : s_->buckets) v.push_back(b->numel);
  return v;
}

nn::GradReadyHook DataParallel::hook() {
  dp::State* s = s_.get();
  return [s](nn::Parameter& p) {
    auto it = s->bucket_of.find(&p);
    if (it == s->bucket_of.end()) return;  // not ours (a frozen extra, say)
    dp::Bucket& b = *s->buckets[it->second];
    if (++b.ready != b.params.size() || !s->opts.overlap) return;
    s->launch(b);
    if (!s->background) s->complete(b);  // Work::wait runs it on this thread
  };
}

void DataParallel::attach(nn::Trainer& trainer) {
  BRAID_CHECK_ARG(trainer.options().rank == s_->rank && trainer.options().world == s_->world,
                  "DataParallel::attach: the trainer was built for rank " +
                      std::to_string(trainer.options().rank) + " of " +
                      std::to_string(trainer.options().world) + ", the communicator is rank " +
                      std::to_string(s_->rank) + " of " + std::to_string(s_->world));
  BRAID_CHECK_ARG(trainer.parameters() == s_->params,
                  "DataParallel::attach: the trainer trains another model");
  trainer.set_hooks(*this);
}

void DataParallel::begin_step(int64_t step, const std::vector<nn::Parameter*>&) {
  step_start_s_ = now_s();
  step_ = step;
  for (auto& b : s_->buckets) {
    b->reset();
    policy_->begin_step(*b);
  }
}

void DataParallel::before_forward(size_t u) { policy_->before_forward(u); }

void DataParallel::after_forward(size_t u) { policy_->after_forward(u); }

void DataParallel::before_backward(size_t u) {
  if (u + 1 == s_->units.size() && step_ == kill_step_ && s_->rank == kill_rank_)
    ::kill(::getpid(), SIGKILL);
  policy_->before_backward(u);
}

void DataParallel::after_backward(size_t u) { policy_->after_backward(u); }

void DataParallel::before_optimizer_step(const std::vector<nn::Parameter*>&) {
  s_->finish_gradients();
}

double DataParallel::clip_grad_norm(const std::vector<nn::Parameter*>&, double max_norm) {
  return policy_->clip_grad_norm(max_norm);
}

void DataParallel::optimizer_step(nn::Optimizer& opt, const std::vector<nn::Parameter*>&,
                                  float lr) {
  policy_->optimizer_step(opt, lr);
}

void DataParallel::after_step(nn::StepState& st) {
  const double comm_s = s_->comm_wait_s + carried_comm_s_;
  s_->comm_wait_s = 0;
  const double wall = now_s() - step_start_s_;
  const int world = s_->world;
  double mine[6] = {st.sums[0], st.sums[1],   st.sums[2], std::max(0.0, wall - comm_s - st.input_s),
                    comm_s,     st.input_s};
  std::vector<double> all(6 * size_t(world));
  const double t0 = now_s();
  if (world > 1)
    s_->comm->all_gather(mine, all.data(), 6, DType::kF64);
  else
    std::copy(mine, mine + 6, all.begin());
  carried_comm_s_ = now_s() - t0;
  // Summed in rank order, so every rank computes the same loss.
  double tot[3] = {0, 0, 0};
  for (int r = 0; r < world; ++r) {
    const double* v = all.data() + 6 * r;
    for (int i = 0; i < 3; ++i) tot[i] += v[i];
    times_[size_t(r)] = {v[3], v[4], v[5]};
  }
  std::copy(tot, tot + 3, st.sums);
}

void DataParallel::gather_all_params() {
  for (auto& b : s_->buckets) policy_->gather_params(*b);
  for (auto& b : s_->buckets) s_->wait_params(*b);
}

void DataParallel::release_all_params() {
  for (auto& b : s_->buckets) policy_->release_params(*b);
}

DpMemory DataParallel::memory() const {
  DpMemory m;
  for (auto& b : s_->buckets) {
    m.param_bytes += (policy_->shards_params() ? b->shard : b->padded) * 4;
    m.grad_bytes += (policy_->shards_grads() ? b->shard : b->padded) * 4;
  }
  m.peak_transient_bytes = s_->peak_transient_bytes;
  return m;
}

DpMemory DataParallel::memory(const nn::Optimizer& opt) const {
  DpMemory m = memory();
  Checkpoint ck;
  opt.save_state(ck);
  for (auto& [k, t] : ck.tensors) m.optim_bytes += int64_t(t.nbytes());
  return m;
}

}  // namespace braid::parallel
