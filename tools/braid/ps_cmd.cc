// braid ps train mlp|dlrm --servers S --workers W --consistency bsp|asp|ssp|kofn
// — the MLP or the DLRM model trained through parameter servers (dlrm: its
// embedding tables are sparse keys, ps_dlrm.cc).
//
// A worker's step at clock c: forward/backward its shard of global batch c
// with the parameters pulled for c, then ONE exchange with the servers
// (ps::Worker::step, one frame per server): report its loss sums to server
// 0, push its gradients (dlrm: the tables' touched rows; scaled by W: the
// trainer gives each rank its share of the global mean, the server
// averages) with the clock flag, and pull for clock c + 1 every dense
// parameter and the table rows batch c + 1 names (the server decides how
// long that waits; under k-of-n it answers with the open round, which
// becomes the next clock, and a straggler pulls that batch's rows again).
// The optimizer runs on the servers (ps.h). Why one exchange: a step of
// this size is a fraction of a millisecond of compute, so each round trip
// to the servers is a large share of it.
//
// Worker 0 writes the JSON log: braid train's step fields, where `loss` is
// over the global batch in BSP and k-of-n (the workers that made the round)
// and over the reports in so far under ASP/SSP (`loss_workers` says how
// many), plus `clock`, the server-0 `clocks` of every worker read right after
// this worker's pull (`clock_spread` = max − min), `time` (seconds since
// the worker started, after the step), `compute_s` (the step's forward and
// backward, a --slow-worker's sleep included) and `exchange_s` (its
// exchange, waits for the round included), `read_lead` (the largest lead
// over the slowest worker any pull was served with; SSP keeps it <= s),
// pushes accepted / late / dropped / folded over all servers, and each
// server's requests and bytes, their rates since the last step, and the
// sparse rows it served as owner and from hot copies (ps_load.h; the done
// record adds the windows before and after the first hot-set refresh). Its
// counters ride on the step's exchange (read after its pull), so logging
// adds no round trip.
//
// --hot-keys: workers call refresh_hot every --hot-every steps, right after
// their pull, and then pull that step's rows again (hot ones from
// replicas). --save-dir: the servers save their shards at round closes
// (braid/ps_checkpoint.h); --resume: every rank finds the same step
// directory, the servers start from it and the workers at its round.
//
// With --replicas R >= 2 a dedicated server may die and the job goes on;
// --kill-server injects such a death and the log says what the fail-over
// took and lost (ps_faults.h). With chains the push is its own request, so
// the fail-over time measured around it is the push's alone.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "braid/checkpoint.h"
#include "braid/env.h"
#include "braid/error.h"
#include "braid/ps.h"
#include "braid/ps_checkpoint.h"
#include "ps_load.h"
#include "ps_faults.h"
#include "ps_spare.h"
#include "ps_train.h"
#include "train_setup.h"

namespace braid::tool {

namespace {

// Every dense parameter of the model, as the keys of the layout (same
// order); the tables are sparse keys.
std::vector<ps::KeyData> key_data(const std::vector<nn::Parameter*>& params, bool grads,
                                  const SparseTables& sparse) {
  std::vector<ps::KeyData> out;
  for (size_t i = 0; i < params.size(); ++i)
    if (!sparse.is_table(i))
      out.push_back({ps::KeyId(i), {}, grads ? params[i]->grad.f32() : params[i]->data.f32()});
  return out;
}

// The worker's StepHooks: no local optimizer, no I/O inside the step.
// After the step the gradients are scaled for the push and the sums kept;
// the loop sends both with its next pull (one exchange per step).
struct PsHooks : nn::StepHooks {
  SparseTables* sparse = nullptr;
  int workers = 1;
  // --slow-worker: this worker's compute takes `slow` times as long. The
  // extra time is spent before the push, so its gradient arrives late (as a
  // straggler's does), and asleep, so it leaves the core to the others.
  double slow = 1, step_t0 = 0;
  std::vector<ps::KeyData> grads;  // the step's push: dense keys, then touched rows
  double sums[3] = {0, 0, 0};      // the step's loss sum, rows, correct
  void begin_step(int64_t, const std::vector<nn::Parameter*>& ps) override {
    step_t0 = now_s();
    // The tables' dense gradients are off (their touched rows are pushed
    // from the sparse gradient), so only the dense parameters have
    // gradients to clear: clearing whole tables each step is rows x dim of
    // memory traffic for nothing.
    for (size_t k = 0; k < ps.size(); ++k)
      if (!sparse->is_table(k)) ps[k]->grad.zero();
  }
  void optimizer_step(nn::Optimizer&, const std::vector<nn::Parameter*>&, float) override {}
  void after_step(nn::StepState& st) override {
    if (slow > 1)
      std::this_thread::sleep_for(std::chrono::duration<double>((slow - 1) * (now_s() - step_t0)));
    std::copy(st.sums, st.sums + 3, sums);
    for (size_t k = 0; k < params.size(); ++k) {
      if (sparse->is_table(k)) continue;
      float* g = params[k]->grad.f32();
      for (int64_t i = 0; i < params[k]->size(); ++i) g[i] *= float(workers);
    }
    grads = key_data(params, true, *sparse);
    sparse->add_push(grads, float(workers));
  }
  std::vector<nn::Parameter*> params;
};



nlohmann::json load_fields(const std::vector<ps::ServerStats>& all) {
  nlohmann::json req = nlohmann::json::array(), bytes = nlohmann::json::array(),
                 owner = nlohmann::json::array(), replica = nlohmann::json::array(),
                 hot = nlohmann::json::array();
  int64_t acc = 0, late = 0, drop = 0, fold = 0;
  for (const auto& s : all) {
    acc += s.pushes_accepted;
    late += s.pushes_late;
    drop += s.pushes_dropped;
    fold += s.pushes_folded;
    req.push_back(s.requests);
    bytes.push_back(s.bytes_in + s.bytes_out);
    owner.push_back(s.pulls_owner);
    replica.push_back(s.pulls_replica);
    hot.push_back(s.hot_rows);
  }
  // Sparse rows served to pulls as their owner and from hot copies, and
  // the rows each server made hot (--hot-keys).
  return {{"pushes_accepted", acc},      {"pushes_late", late},
          {"pushes_dropped", drop},      {"pushes_folded", fold},
          {"server_requests", req},      {"server_bytes", bytes},
          {"server_pulls_owner", owner}, {"server_pulls_replica", replica},
          {"server_hot_rows", hot}};
}

}  // namespace

int run_ps_worker(const Job& job, PsFlags f, int w, TrainSetup& setup, const ps::Layout& layout,
               SparseTables& sparse, int64_t start) {
  const bool logger = w == 0;
  const auto mode = ps::parse_consistency(f.consistency);
  const auto [slow_rank, slow_factor] = parse_slow(f.slow);
  ps::WorkerOptions wo;
  wo.rank = w;
  wo.replicas = f.replicas;
  wo.secret = job.secret;
  wo.timeout = std::chrono::milliseconds(int64_t(f.timeout_s * 1000));
  wo.shm_bytes = size_t(f.shm_bytes);
  ps::Worker worker(layout, wo, job.store);

  setup.opts.rank = w;
  setup.opts.world = f.workers;
  PsTrainer trainer(*setup.model, *setup.train, *setup.opt, setup.sched, setup.opts);
  if (setup.loss) trainer.set_loss(*setup.loss);
  PsHooks hooks;
  hooks.sparse = &sparse;
  FailoverProbe faults(job, f, w, setup.steps);
  PushHold hold(job, f, w, setup.steps);
  hooks.workers = f.workers;
  if (w == slow_rank) hooks.slow = slow_factor;
  hooks.params = trainer.parameters();
  trainer.set_hooks(hooks);
  const auto pull_all = key_data(hooks.params, false, sparse);

  std::ofstream jlog = open_json_log(f, logger);
  if (logger && !f.quiet)
    std::fprintf(stderr,
                 "braid ps train %s: %lld steps, global batch %lld, %s lr %g, %d worker%s, "
                 "%d server%s (%s), %s%s\n",
                 f.model.c_str(), (long long)setup.steps, (long long)f.batch,
                 (f.rule.empty() ? f.optimizer : f.rule).c_str(), f.lr, f.workers,
                 f.workers > 1 ? "s" : "", f.servers, f.servers > 1 ? "s" : "",
                 f.placement.c_str(), f.consistency.c_str(),
                 mode == ps::Consistency::kSsp ? (" s=" + std::to_string(f.staleness)).c_str() : "");
  StepReporter report(f, start, setup.steps, std::min<int64_t>(20, (setup.steps - start) / 5),
                      logger);
  LoadMeter load(start + f.hot_every);
  const bool wait_round = mode == ps::Consistency::kBsp || mode == ps::Consistency::kRoundK;
  // --hot-keys: the steps whose rows are pulled after a hot-set refresh.
  auto refresh_at = [&](int64_t c) {
    return f.hot_keys && c < setup.steps && c > start && (c - start) % f.hot_every == 0;
  };
  // The pull for clock c: the dense keys and the rows batch c names (at a
  // refresh step, pulled after the refresh instead).
  auto add_pull = [&](ps::StepRequest& r, int64_t c) {
    r.pull = pull_all;
    r.pull_clock = c;
    if (!sparse.empty() && !refresh_at(c)) sparse.add_pull(r.pull, trainer.input_of(c));
  };
  // Runs r; `stats` gets the servers' counters (the logger asks, after the
  // pull). Under k-of-n a straggler's pull may be assigned a later (open)
  // round, whose batch names other rows: those are pulled again for it.
  std::vector<ps::ServerStats> stats;
  auto exchange = [&](ps::StepRequest& r) {
    int64_t got = worker.step(r, &stats);
    while (!sparse.empty() && !r.pull.empty() && got != r.pull_clock && got < setup.steps) {
      r.push_round = false;
      add_pull(r, got);
      got = worker.step(r, &stats);
    }
    if (!r.pull.empty()) sparse.store_pulled();
    return got;
  };
  ps::StepRequest first;
  first.stats = logger;
  add_pull(first, start);
  int64_t clock = exchange(first), taken = 0;
  hold.pulled(clock);
  // Every worker starts training together, its first pull served before
  // anyone pushes: otherwise under k-of-n the first workers up could close
  // every round before a late starter's first pull, and that worker would
  // take no step at all. So every worker takes step `start`.
  {
    job.store->set("ps/started/" + std::to_string(w), Bytes{1});
    std::vector<std::string> keys;
    for (int o = 0; o < f.workers; ++o) keys.push_back("ps/started/" + std::to_string(o));
    job.store->wait(keys, wo.timeout);
  }
  const double t0 = now_s();
  double last_loss = 0;
  while (clock < setup.steps) {
    // Server 0's counters right after this step's pull.
    const ps::ServerStats at_pull = logger ? stats.at(0) : ps::ServerStats{};
    trainer.set_next_step(clock);
    const double t_compute = now_s();
    nn::StepStats st = trainer.step();
    const double compute_s = now_s() - t_compute;
    ++taken;
    ps::StepRequest r;
    r.push_round = true;
    r.clock = clock;
    r.grads = std::move(hooks.grads);
    std::copy(hooks.sums, hooks.sums + 3, r.sums);
    r.pull_clock = clock + 1;
    if (clock + 1 < setup.steps) add_pull(r, clock + 1);
    r.stats = logger;
    r.stats_round = clock;
    r.stats_wait = wait_round;
    hold.before_push(clock);
    const double t_exchange = now_s();
    faults.before_push(clock);
    if (f.replicas > 1) {
      ps::StepRequest push = r;
      push.pull.clear();
      push.stats = false;
      worker.step(push);
      r.push_round = false;
      faults.after_push(clock);
    }
    const int64_t next = exchange(r);
    hold.pulled(next);
    if (f.replicas == 1) faults.after_push(clock);
    // Under BSP exactly `next` rounds are closed on every server now, so
    // every worker learns the same hot set; batch next's rows are then
    // pulled, the hot ones from replicas.
    if (refresh_at(next)) {
      worker.refresh_hot();
      ps::StepRequest rows;
      rows.pull_clock = next;
      sparse.add_pull(rows.pull, trainer.input_of(next));
      worker.step(rows);
      sparse.store_pulled();
    }
    if (logger) {
      const nlohmann::json local = st.loss;
      if (stats[0].report_rows > 0) st.loss = stats[0].report_loss / stats[0].report_rows;
      last_loss = st.loss;
      report.after_step(clock, st);
      if (jlog.is_open()) {
        const auto [lo, hi] = std::minmax_element(at_pull.clocks.begin(), at_pull.clocks.end());
        nlohmann::json rec = {{"clock", clock},
                              {"clocks", at_pull.clocks},
                              {"clock_spread", *hi - *lo},
                              {"read_lead", at_pull.max_read_lead}};
        rec.update(step_record(st));
        rec["time"] = now_s() - t0;
        rec["compute_s"] = compute_s;
        rec["exchange_s"] = now_s() - t_exchange;
        rec.update(load_fields(stats));
        rec.update(load.sample(clock, rec["time"], stats));
        rec["loss_workers"] = stats[0].report_workers;
        rec["worker_loss"] = local;
        rec.update(faults.step_fields(clock));
        jlog << rec.dump() << '\n';
      }
    }
    clock = next;
  }
  faults.publish(worker);  // before finish, as done_fields expects
  if (logger) {
    const double throughput = report.finish();
    await_spares(job, f);  // the final tails are the joined spares (ps_spare.h)
    // The counters once the other workers are done: a straggler's last
    // (late) push may land after this worker's last step.
    std::vector<ps::ServerStats> all;
    for (int s = 0; s < f.servers; ++s) all.push_back(worker.final_stats(s));
    // The final parameters, after every worker's last push (ASP and k-of-n
    // apply a straggler's after this worker's last step; SSP: s rounds may
    // be open).
    const int64_t last = setup.steps + (mode == ps::Consistency::kSsp ? f.staleness : 0);
    worker.pull(pull_all, last);
    sparse.pull_all(worker, last);
    nlohmann::json done = done_record(f, setup.steps, last_loss, report.seconds(), throughput);
    done.update(load_fields(all));
    done.update({{"workers", f.workers}, {"servers", f.servers}, {"placement", f.placement},
                 {"consistency", f.consistency}, {"steps_taken", taken},
                 {"clocks", all[0].clocks}, {"contributed", all[0].contributed}});
    nlohmann::json rounds = nlohmann::json::array();
    for (const auto& s : all) rounds.push_back(s.rounds_closed);
    done["rounds_closed"] = rounds;
    done["resumed_at"] = start;
    done["load"] = load.windows();
    nlohmann::json hot = nlohmann::json::array();
    for (const auto& [k, row] : worker.hot_rows()) hot.push_back({k, row, layout.row_server(row)});
    done["hot_rows"] = hot;
    done["shm_links"] = worker.worker_stats().shm_links;  // this worker's
    done.update(faults.done_fields(worker, all));
    const nn::EvalStats ev = trainer.evaluate(*setup.test, 1000);
    const std::string dlrm = f.model == "dlrm" ? dlrm_summary(*setup.test, ev, done) : "";
    done["test_accuracy"] = ev.accuracy;
    if (!f.checkpoint.empty()) {
      Checkpoint ck;
      add_parameters(ck, hooks.params);
      save_checkpoint(f.checkpoint, ck);
    }
    if (jlog.is_open()) jlog << done.dump() << '\n';
    std::printf("done: %s %lld steps on %d workers / %d servers (%s), final loss %.4f, test "
                "accuracy %.4f%s, %.1fs\n",
                f.model.c_str(), (long long)setup.steps, f.workers, f.servers,
                f.consistency.c_str(), last_loss, ev.accuracy, dlrm.c_str(), report.seconds());
    std::fflush(stdout);
  }
  worker.finish();
  return 0;
}

std::pair<int, double> parse_slow(const std::string& s) {
  if (s.empty()) return {-1, 1.0};
  const size_t colon = s.find(':');
  char* end = nullptr;
  const double factor = colon == std::string::npos ? 0 : std::strtod(s.c_str() + colon + 1, &end);
  if (colon == std::string::npos || colon == 0 || !end || *end || factor < 1)
    throw Error(Errc::kInvalidArgument,
                "--slow-worker '" + s + "': expected RANK:FACTOR with FACTOR >= 1");
  return {std::atoi(s.c_str()), factor};
}

}  // namespace braid::tool
