// braid ps train mlp|dlrm --servers S --workers W --consistency bsp|asp|ssp|kofn
// — the MLP or the DLRM model trained through parameter servers (dlrm: its
// embedding tables are sparse keys: ps::ModelKeys, braid/ps_trainer.h).
//
// A worker's loop is the library's ps::WorkerTrainer (braid/ps_trainer.h:
// one exchange with the servers per step); this file sets it up and logs.
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
#include "train_report.h"
#include "train_setup.h"

namespace braid::tool {

namespace {

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

// The loop's hooks: the fault-injection points (ps_faults.h) around each
// exchange, and worker 0's log.
struct WorkerLog : ps::TrainerHooks {
  FailoverProbe& faults;
  PushHold& hold;
  StepReporter* report = nullptr;  // worker 0's
  std::ofstream* jlog = nullptr;
  LoadMeter* load = nullptr;
  double t0 = 0, last_loss = 0;
  WorkerLog(FailoverProbe& f, PushHold& h) : faults(f), hold(h) {}

  void started() override { t0 = now_s(); }
  void pulled(int64_t clock) override { hold.pulled(clock); }
  void before_exchange(int64_t clock) override { hold.before_push(clock); }
  void before_push(int64_t clock) override { faults.before_push(clock); }
  void after_push(int64_t clock) override { faults.after_push(clock); }
  void after_step(ps::StepReport& r) override {
    if (!report) return;
    const int64_t clock = r.clock;
    const std::vector<ps::ServerStats>& stats = *r.servers;
    const ps::ServerStats& at_pull = r.at_pull;
    nn::StepStats& st = r.stats;
    const nlohmann::json local = st.loss;
    if (stats[0].report_rows > 0) st.loss = stats[0].report_loss / stats[0].report_rows;
    last_loss = st.loss;
    report->after_step(clock, st);
    if (jlog->is_open()) {
      const auto [lo, hi] = std::minmax_element(at_pull.clocks.begin(), at_pull.clocks.end());
      nlohmann::json rec = {{"clock", clock},
                            {"clocks", at_pull.clocks},
                            {"clock_spread", *hi - *lo},
                            {"read_lead", at_pull.max_read_lead}};
      rec.update(step_record(st));
      rec["time"] = now_s() - t0;
      rec["compute_s"] = r.compute_s;
      rec["exchange_s"] = now_s() - r.exchange_t0;
      rec.update(load_fields(stats));
      rec.update(load->sample(clock, rec["time"], stats));
      rec["loss_workers"] = stats[0].report_workers;
      rec["worker_loss"] = local;
      rec.update(faults.step_fields(clock));
      *jlog << rec.dump() << '\n';
    }
  }
};

}  // namespace

int run_ps_worker(const Job& job, PsFlags f, int w, TrainSetup& setup, const ps::Layout& layout,
                  ps::ModelKeys& keys, int64_t start) {
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
  ps::TrainerOptions po;
  po.worker = w;
  po.workers = f.workers;
  po.start = start;
  po.steps = setup.steps;
  po.consistency = mode;
  po.replicas = f.replicas;
  po.hot_keys = f.hot_keys;
  po.hot_every = f.hot_every;
  if (w == slow_rank) po.slow = slow_factor;
  po.stats = logger;
  po.timeout = wo.timeout;
  ps::WorkerTrainer trainer(worker, job.store, keys, *setup.model, *setup.train, *setup.opt,
                            setup.sched, setup.opts, po);
  if (setup.loss) trainer.set_loss(*setup.loss);
  FailoverProbe faults(job, f, w, setup.steps);
  PushHold hold(job, f, w, setup.steps);

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
  WorkerLog log(faults, hold);
  if (logger) {
    log.report = &report;
    log.jlog = &jlog;
    log.load = &load;
  }
  const int64_t taken = trainer.train(&log);
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
    trainer.pull_final(last);
    nlohmann::json done = done_record(f, setup.steps, log.last_loss, report.seconds(), throughput);
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
      add_parameters(ck, trainer.parameters());
      save_checkpoint(f.checkpoint, ck);
    }
    if (jlog.is_open()) jlog << done.dump() << '\n';
    std::printf("done: %s %lld steps on %d workers / %d servers (%s), final loss %.4f, test "
                "accuracy %.4f%s, %.1fs\n",
                f.model.c_str(), (long long)setup.steps, f.workers, f.servers,
                f.consistency.c_str(), log.last_loss, ev.accuracy, dlrm.c_str(), report.seconds());
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
