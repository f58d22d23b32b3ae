// A parameter-server worker's training loop (braid/ps_trainer.h): the step
// at clock c, then one exchange with the servers that pushes c and pulls
// c + 1. Why one exchange: a step of this size is a fraction of a
// millisecond of compute, so each round trip to the servers is a large
// share of it.
#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

#include "braid/env.h"
#include "braid/ps_trainer.h"

namespace braid::ps {

// The worker's StepHooks: no local optimizer, no I/O inside the step.
// After the step the gradients are scaled for the push and the sums kept;
// the loop sends both with its next pull (one exchange per step).
struct WorkerTrainer::Loop : nn::StepHooks {
  Loop(Worker& w, std::shared_ptr<Store> s, ModelKeys& k, TrainerOptions o)
      : worker(w), store(std::move(s)), keys(k), opt(o) {}
  Worker& worker;
  std::shared_ptr<Store> store;
  ModelKeys& keys;
  const TrainerOptions opt;
  std::vector<nn::Parameter*> params;
  double step_t0 = 0;
  std::vector<KeyData> grads;      // the step's push: dense keys, then touched rows
  double sums[3] = {0, 0, 0};      // the step's loss sum, rows, correct
  std::vector<ServerStats> stats;  // read with the last exchange (opt.stats)
  std::vector<int64_t> ahead;      // input_of's rows
  Tensor ahead_x, ahead_y;

  void begin_step(int64_t, const std::vector<nn::Parameter*>& ps) override {
    step_t0 = now_s();
    // The tables' dense gradients are off (their touched rows are pushed
    // from the sparse gradient), so only the dense parameters have
    // gradients to clear: clearing whole tables each step is rows x dim of
    // memory traffic for nothing.
    for (size_t k = 0; k < ps.size(); ++k)
      if (!keys.is_table(k)) ps[k]->grad.zero();
  }
  void optimizer_step(nn::Optimizer&, const std::vector<nn::Parameter*>&, float) override {}
  void after_step(nn::StepState& st) override {
    if (opt.slow > 1)
      std::this_thread::sleep_for(
          std::chrono::duration<double>((opt.slow - 1) * (now_s() - step_t0)));
    std::copy(st.sums, st.sums + 3, sums);
    for (size_t k = 0; k < params.size(); ++k) {
      if (keys.is_table(k)) continue;
      float* g = params[k]->grad.f32();
      for (int64_t i = 0; i < params[k]->size(); ++i) g[i] *= float(opt.workers);
    }
    grads = keys.dense(true);
    keys.add_push(grads, float(opt.workers));
  }
};

WorkerTrainer::WorkerTrainer(Worker& worker, std::shared_ptr<Store> store, ModelKeys& keys,
                             nn::Module& model, nn::Dataset& data, nn::Optimizer& opt,
                             nn::LrSchedule schedule, nn::TrainOptions opts, TrainerOptions po)
    : nn::Trainer(model, data, opt, std::move(schedule), std::move(opts)),
      loop_(std::make_unique<Loop>(worker, std::move(store), keys, po)) {
  loop_->params = parameters();
  set_hooks(*loop_);
}

WorkerTrainer::~WorkerTrainer() = default;

const Tensor& WorkerTrainer::input_of(int64_t step) {
  sampler_.shard(step, loop_->ahead);
  data_.gather(loop_->ahead.data(), int64_t(loop_->ahead.size()), loop_->ahead_x, loop_->ahead_y);
  return loop_->ahead_x;
}

int64_t WorkerTrainer::train(TrainerHooks* hooks) {
  TrainerHooks none;
  TrainerHooks& h = hooks ? *hooks : none;
  Loop& L = *loop_;
  const TrainerOptions& o = L.opt;
  Worker& worker = L.worker;
  ModelKeys& keys = L.keys;
  const std::vector<KeyData> pull_all = keys.dense(false);
  const bool wait_round =
      o.consistency == Consistency::kBsp || o.consistency == Consistency::kRoundK;
  // Hot keys: the steps whose rows are pulled after a hot-set refresh.
  auto refresh_at = [&](int64_t c) {
    return o.hot_keys && c < o.steps && c > o.start && (c - o.start) % o.hot_every == 0;
  };
  // The pull for clock c: the dense keys and the rows batch c names (at a
  // refresh step, pulled after the refresh instead).
  auto add_pull = [&](StepRequest& r, int64_t c) {
    r.pull = pull_all;
    r.pull_clock = c;
    if (keys.has_tables() && !refresh_at(c)) keys.add_pull(r.pull, input_of(c));
  };
  // Runs r; L.stats gets the servers' counters (when asked, after the
  // pull). Under k-of-n a straggler's pull may be assigned a later (open)
  // round, whose batch names other rows: those are pulled again for it.
  auto exchange = [&](StepRequest& r) {
    int64_t got = worker.step(r, &L.stats);
    while (keys.has_tables() && !r.pull.empty() && got != r.pull_clock && got < o.steps) {
      r.push_round = false;
      add_pull(r, got);
      got = worker.step(r, &L.stats);
    }
    if (!r.pull.empty()) keys.store_pulled();
    return got;
  };
  StepRequest first;
  first.stats = o.stats;
  add_pull(first, o.start);
  int64_t clock = exchange(first), taken = 0;
  h.pulled(clock);
  // Every worker starts training together, its first pull served before
  // anyone pushes (braid/ps_trainer.h).
  {
    L.store->set("ps/started/" + std::to_string(o.worker), Bytes{1});
    std::vector<std::string> started;
    for (int w = 0; w < o.workers; ++w) started.push_back("ps/started/" + std::to_string(w));
    L.store->wait(started, o.timeout);
  }
  h.started();
  while (clock < o.steps) {
    // Server 0's counters right after this step's pull.
    StepReport rep;
    rep.at_pull = o.stats ? L.stats.at(0) : ServerStats{};
    set_next_step(clock);
    const double t_compute = now_s();
    rep.stats = step();
    rep.compute_s = now_s() - t_compute;
    ++taken;
    StepRequest r;
    r.push_round = true;
    r.clock = clock;
    r.grads = std::move(L.grads);
    std::copy(L.sums, L.sums + 3, r.sums);
    r.pull_clock = clock + 1;
    if (clock + 1 < o.steps) add_pull(r, clock + 1);
    r.stats = o.stats;
    r.stats_round = clock;
    r.stats_wait = wait_round;
    h.before_exchange(clock);
    rep.exchange_t0 = now_s();
    h.before_push(clock);
    if (o.replicas > 1) {
      StepRequest push = r;
      push.pull.clear();
      push.stats = false;
      worker.step(push);
      r.push_round = false;
      h.after_push(clock);
    }
    const int64_t next = exchange(r);
    h.pulled(next);
    if (o.replicas == 1) h.after_push(clock);
    // Under BSP exactly `next` rounds are closed on every server now, so
    // every worker learns the same hot set; batch next's rows are then
    // pulled, the hot ones from replicas.
    if (refresh_at(next)) {
      worker.refresh_hot();
      StepRequest rows;
      rows.pull_clock = next;
      keys.add_pull(rows.pull, input_of(next));
      worker.step(rows);
      keys.store_pulled();
    }
    rep.clock = clock;
    rep.next = next;
    rep.servers = &L.stats;
    h.after_step(rep);
    clock = next;
  }
  return taken;
}

void WorkerTrainer::pull_final(int64_t clock) {
  loop_->worker.pull(loop_->keys.dense(false), clock);
  loop_->keys.pull_all(loop_->worker, clock);
}

}  // namespace braid::ps
