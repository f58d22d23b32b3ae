// braid ps train mlp|dlrm --servers S --workers W --consistency bsp|asp|ssp|kofn
// — the MLP or the DLRM model trained through parameter servers (dlrm: its
// embedding tables are sparse keys, ps_dlrm.cc).
//
// Processes: with --placement dedicated (default) the job has W + S ranks,
// ranks 0..W-1 workers and W..W+S-1 servers; with --placement colocated it
// has W ranks and workers 0..S-1 also run a server (S ≤ W; --servers 1 is
// "rank 0 as server"). Started plainly it forks them under
// launch::Supervisor, meeting through a private file store; under braid run
// / torchrun / mpirun / srun it joins the job (whose size must match).
//
// A worker's step at clock c: pull every parameter for clock c (the server
// decides how long that waits; under k-of-n it answers with the open round,
// which becomes c), forward/backward its shard of global batch c, report
// its loss sums to server 0, push its gradients (dlrm: the tables' touched rows) (scaled by W: the trainer
// gives each rank its share of the global mean, the server averages) with
// the clock flag. The optimizer runs on the servers (ps.h).
//
// Worker 0 writes the JSON log: braid train's step fields, where `loss` is
// over the global batch in BSP and k-of-n (the workers that made the round)
// and over the reports in so far under ASP/SSP (`loss_workers` says how
// many), plus `clock`, the server-0 `clocks` of every worker read right after
// this worker's pull (`clock_spread` = max − min), `time` (seconds since
// the worker started, after the step) and `read_lead` (the
// largest lead over the slowest worker any pull was served with; SSP keeps it
// <= s), pushes accepted / late /
// dropped / folded over all servers, and each server's requests and bytes,
// their rates since the last step, and the sparse rows it served as owner
// and from hot copies (ps_load.h; the done record adds the windows before
// and after the first hot-set refresh).
//
// --hot-keys: workers call refresh_hot every --hot-every steps, right after
// their pull. --save-dir: the servers save their shards at round closes
// (braid/ps_checkpoint.h); --resume: every rank finds the same step
// directory, the servers start from it and the workers at its round.
//
// With --replicas R >= 2 a dedicated server may die and the job goes on;
// --kill-server injects such a death and the log says what the fail-over
// took and lost (ps_faults.h).
#include <CLI/CLI.hpp>
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
#include "comm/setup/bootstrap.h"
#include "launch/supervisor.h"
#include "ps_load.h"
#include "ps_faults.h"
#include "ps_train.h"
#include "subcommands.h"
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

// The worker's StepHooks: no local optimizer; after the step, report the
// sums and push the gradients with the clock flag. A dlrm worker pulls the
// rows its micro-batch names before the forward.
struct PsHooks : nn::StepHooks {
  ps::Worker* worker = nullptr;
  PsTrainer* trainer = nullptr;
  SparseTables* sparse = nullptr;
  FailoverProbe* faults = nullptr;
  int workers = 1;
  int64_t clock = 0;
  // --slow-worker: this worker's compute takes `slow` times as long. The
  // extra time is spent before the push, so its gradient arrives late (as a
  // straggler's does), and asleep, so it leaves the core to the others.
  double slow = 1, step_t0 = 0;
  void begin_step(int64_t, const std::vector<nn::Parameter*>& ps) override {
    step_t0 = now_s();
    // The tables' dense gradients are off (their touched rows are pushed
    // from the sparse gradient), so only the dense parameters have
    // gradients to clear: clearing whole tables each step is rows x dim of
    // memory traffic for nothing.
    for (size_t k = 0; k < ps.size(); ++k)
      if (!sparse->is_table(k)) ps[k]->grad.zero();
  }
  void before_forward(size_t unit) override {
    if (unit == 0) sparse->pull_rows(*worker, trainer->batch_input(), clock);
  }
  void optimizer_step(nn::Optimizer&, const std::vector<nn::Parameter*>&, float) override {}
  void after_step(nn::StepState& st) override {
    if (slow > 1)
      std::this_thread::sleep_for(std::chrono::duration<double>((slow - 1) * (now_s() - step_t0)));
    worker->report(clock, st.sums[0], st.sums[1], st.sums[2]);
    for (size_t k = 0; k < params.size(); ++k) {
      if (sparse->is_table(k)) continue;
      float* g = params[k]->grad.f32();
      for (int64_t i = 0; i < params[k]->size(); ++i) g[i] *= float(workers);
    }
    std::vector<ps::KeyData> grads = key_data(params, true, *sparse);
    sparse->add_push(grads, float(workers));
    faults->before_push(clock);
    worker->push(grads, clock, true);
    faults->after_push(clock);
  }
  std::vector<nn::Parameter*> params;
};

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

ps::ServerOptions server_options(const PsFlags& f, const TrainSetup& setup, int rank) {
  ps::ServerOptions o;
  o.rank = rank;
  o.workers = f.workers;
  o.consistency = ps::parse_consistency(f.consistency);
  o.staleness = f.staleness;
  o.round_k = f.round_k;
  o.replicas = f.replicas;
  o.late = f.late == "fold" ? ps::LatePolicy::kFold : ps::LatePolicy::kDrop;
  o.rule.kind = ps::parse_update_rule(f.rule.empty() ? f.optimizer : f.rule);
  o.rule.momentum = o.rule.kind == ps::UpdateRule::kSgd ? float(f.momentum) : 0.0f;
  o.rule.weight_decay = float(f.weight_decay);
  if (o.rule.kind == ps::UpdateRule::kAdagrad) o.rule.eps = 1e-10f;
  o.lr = setup.sched;
  o.timeout = std::chrono::milliseconds(int64_t(f.timeout_s * 1000));
  o.hot_keys = f.hot_keys;
  o.hot_max_rows = f.hot_max_rows;
  o.save_dir = f.save_dir;
  o.save_every = f.save_every;
  o.save_last = f.save_dir.empty() ? 0 : setup.steps;
  o.checkpoint_meta = {{"seed", std::to_string(f.seed)}, {"model", f.model}};
  return o;
}

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

int run_worker(const Job& job, PsFlags f, int w, TrainSetup& setup, const ps::Layout& layout,
               SparseTables& sparse, int64_t start) {
  const bool logger = w == 0;
  const auto mode = ps::parse_consistency(f.consistency);
  const auto [slow_rank, slow_factor] = parse_slow(f.slow);
  ps::WorkerOptions wo;
  wo.rank = w;
  wo.replicas = f.replicas;
  wo.secret = job.secret;
  wo.timeout = std::chrono::milliseconds(int64_t(f.timeout_s * 1000));
  ps::Worker worker(layout, wo, job.store);

  setup.opts.rank = w;
  setup.opts.world = f.workers;
  PsTrainer trainer(*setup.model, *setup.train, *setup.opt, setup.sched, setup.opts);
  if (setup.loss) trainer.set_loss(*setup.loss);
  PsHooks hooks;
  hooks.worker = &worker;
  hooks.trainer = &trainer;
  hooks.sparse = &sparse;
  FailoverProbe faults(job, f, w, setup.steps);
  hooks.faults = &faults;
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
  double last_loss = 0;
  int64_t clock = start, taken = 0;
  const double t0 = now_s();
  while (clock < setup.steps) {
    clock = worker.pull(pull_all, clock);
    if (clock >= setup.steps) break;
    // Under BSP exactly `clock` rounds are closed on every server now, so
    // every worker learns the same hot set.
    if (f.hot_keys && clock > start && (clock - start) % f.hot_every == 0) worker.refresh_hot();
    nlohmann::json rec;
    if (jlog.is_open()) {
      const ps::ServerStats s0 = worker.stats(0);
      const auto [lo, hi] = std::minmax_element(s0.clocks.begin(), s0.clocks.end());
      rec = {{"clock", clock}, {"clocks", s0.clocks}, {"clock_spread", *hi - *lo},
             {"read_lead", s0.max_read_lead}};
    }
    hooks.clock = clock;
    trainer.set_next_step(clock);
    nn::StepStats st = trainer.step();
    ++taken;
    if (logger) {
      const bool wait = mode == ps::Consistency::kBsp || mode == ps::Consistency::kRoundK;
      std::vector<ps::ServerStats> all;
      for (int s = 0; s < f.servers; ++s) all.push_back(worker.stats(s, clock, wait && s == 0));
      const nlohmann::json local = st.loss;
      if (all[0].report_rows > 0) st.loss = all[0].report_loss / all[0].report_rows;
      last_loss = st.loss;
      report.after_step(clock, st);
      if (jlog.is_open()) {
        rec.update(step_record(st));
        rec["time"] = now_s() - t0;
        rec.update(load_fields(all));
        rec.update(load.sample(clock, rec["time"], all));
        rec["loss_workers"] = all[0].report_workers;
        rec["worker_loss"] = local;
        rec.update(faults.step_fields(clock));
        jlog << rec.dump() << '\n';
      }
    }
    ++clock;
  }
  faults.publish(worker);  // before finish, as done_fields expects
  if (logger) {
    const double throughput = report.finish();
    // The final parameters: every round applied (SSP: s rounds may be open).
    const int64_t last = setup.steps + (mode == ps::Consistency::kSsp ? f.staleness : 0);
    worker.pull(pull_all, last);
    sparse.pull_all(worker, last);
    // The counters once the other workers are done: a straggler's last
    // (late) push may land after this worker's last step.
    std::vector<ps::ServerStats> all;
    for (int s = 0; s < f.servers; ++s) all.push_back(worker.final_stats(s));
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

int run_rank(const Job& job, PsFlags f) {
  const bool dedicated = f.placement == "dedicated";
  const int world = dedicated ? f.workers + f.servers : f.workers;
  if (job.size != world)
    throw Error(Errc::kInvalidArgument,
                "braid ps: " + std::to_string(f.workers) + " workers and " +
                    std::to_string(f.servers) + " servers (" + f.placement + ") need " +
                    std::to_string(world) + " ranks, the job has " + std::to_string(job.size));
  const bool is_worker = job.rank < f.workers;
  const int server = dedicated ? (is_worker ? -1 : job.rank - f.workers)
                               : (job.rank < f.servers ? job.rank : -1);
  apply_threads(f, world, job.rank == 0);
  apply_model_defaults(f);
  TrainSetup setup = build_setup(f, job.rank == 0);
  ps::Layout layout(f.servers);
  std::vector<std::vector<float>> init;
  SparseTables sparse(*setup.model, setup.model->parameters());
  sparse.add_keys(layout, init);
  // --resume: every rank finds the same step directory (nothing writes
  // one before every worker has pulled, i.e. before all of them read it).
  int64_t start = 0;
  std::string resume_dir;
  if (!f.resume.empty()) {
    const ps::ResumePoint rp = ps::find_resume_point(f.resume, f.servers);
    Checkpoint meta;
    meta.meta = rp.meta;
    start = resume_step(meta, f.seed, rp.step_dir);
    BRAID_CHECK_ARG(start < setup.steps, "braid ps: the checkpoint in " + rp.step_dir +
                                             " is at step " + std::to_string(start) +
                                             ", --steps " + std::to_string(setup.steps) +
                                             " leaves nothing to train");
    resume_dir = rp.step_dir;
  }
  std::unique_ptr<ServerFaults> faults;
  std::unique_ptr<ps::Server> srv;
  if (server >= 0) {
    faults = std::make_unique<ServerFaults>(job, f, server);
    ps::ServerOptions o = server_options(f, setup, server);
    o.secret = job.secret;
    o.resume_from = resume_dir;
    srv = std::make_unique<ps::Server>(
        layout, o, job.store, init,
        [&](ps::KeyId k, int64_t row, float* out) { sparse.init_row(k, row, out); });
  }
  int rc = 0;
  if (is_worker) rc = run_worker(job, f, job.rank, setup, layout, sparse, start);
  // A server lives until every worker has said goodbye; the job's
  // supervisor or launcher ends it sooner when a rank fails (other than a
  // server that marked its death survivable, ps_faults.h).
  if (srv) srv->wait_finished(std::chrono::hours(24 * 7));
  return rc;
}

void check_flags(const PsFlags& f) {
  BRAID_CHECK_ARG(f.workers >= 1 && f.servers >= 1, "braid ps: --workers and --servers must be >= 1");
  BRAID_CHECK_ARG(f.placement == "dedicated" || f.servers <= f.workers,
                  "braid ps: --placement colocated hosts at most one server per worker (--servers " +
                      std::to_string(f.servers) + " > --workers " + std::to_string(f.workers) + ")");
  const auto mode = ps::parse_consistency(f.consistency);
  BRAID_CHECK_ARG(mode != ps::Consistency::kRoundK || (f.round_k >= 1 && f.round_k <= f.workers),
                  "braid ps: --consistency kofn needs --round-k K with 1 <= K <= --workers");
  BRAID_CHECK_ARG(f.clip == 0, "braid ps: --clip needs the global gradient norm, which the "
                               "servers do not compute; not supported");
  BRAID_CHECK_ARG(f.checkpoint_every == 0,
                  "braid ps: --checkpoint writes the final weights only; the servers' state is "
                  "saved with --save-dir DIR --save-every N");
  BRAID_CHECK_ARG(f.save_every >= 0, "braid ps: --save-every must be >= 0");
  BRAID_CHECK_ARG(f.save_every == 0 || !f.save_dir.empty(), "braid ps: --save-every needs --save-dir");
  BRAID_CHECK_ARG(f.save_dir.empty() || mode != ps::Consistency::kAsp,
                  "braid ps: --save-dir: servers save at round closes, and asp has no rounds");
  BRAID_CHECK_ARG(f.init_from.empty() || f.resume.empty(),
                  "braid ps: --init-from and --resume exclude each other");
  if (f.hot_keys) {
    BRAID_CHECK_ARG(f.model == "dlrm", "braid ps: --hot-keys needs sparse rows (dlrm)");
    BRAID_CHECK_ARG(mode == ps::Consistency::kBsp || mode == ps::Consistency::kSsp,
                    "braid ps: --hot-keys needs --consistency bsp or ssp");
    BRAID_CHECK_ARG(f.replicas == 1, "braid ps: --hot-keys needs --replicas 1");
    BRAID_CHECK_ARG(f.hot_every >= 1 && f.hot_max_rows >= 1,
                    "braid ps: --hot-every and --hot-max-rows must be >= 1");
  }
  BRAID_CHECK_ARG(f.model != "dlrm" || f.accum == 1,
                  "braid ps train dlrm: --accum must be 1 (a micro-batch's rows are pulled "
                  "before its forward and its touched rows pushed after its backward)");
  parse_slow(f.slow);
  parse_kill_server(f);
  BRAID_CHECK_ARG(f.replicas >= 1 && f.replicas <= f.servers,
                  "braid ps: --replicas " + std::to_string(f.replicas) +
                      " needs 1 <= R <= --servers (" + std::to_string(f.servers) + ")");
}

}  // namespace

int ps_main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "bench") == 0) return ps_bench_main(argc - 1, argv + 1);
  if (argc < 2 || std::strcmp(argv[1], "train") != 0) {
    std::fprintf(stderr, "usage: braid ps bench [options] | braid ps train mlp|dlrm --servers S --workers W --consistency "
                         "bsp|asp|ssp|kofn [options]\n");
    return 2;
  }
  if (argc >= 3 && argv[2][0] != '-' && std::strcmp(argv[2], "mlp") != 0 &&
      std::strcmp(argv[2], "dlrm") != 0)
    throw Error(Errc::kInvalidArgument, std::string("braid ps train: model '") + argv[2] +
                                            "' is not available; mlp and dlrm are");
  CLI::App app{"braid ps train: train a model through parameter servers", "braid ps train"};
  PsFlags f;
  add_train_options(app, f, true);
  app.add_option("--servers", f.servers, "parameter servers (1)")->check(CLI::PositiveNumber);
  app.add_option("--workers", f.workers, "workers (1)")->check(CLI::PositiveNumber);
  app.add_option("--placement", f.placement,
                 "dedicated (servers are ranks of their own) or colocated (workers 0..S-1 "
                 "each run a server)")
      ->check(CLI::IsMember({"dedicated", "colocated"}));
  app.add_option("--consistency", f.consistency, "bsp, asp, ssp or kofn")
      ->check(CLI::IsMember({"bsp", "asp", "ssp", "kofn"}));
  app.add_option("--staleness", f.staleness, "ssp: clocks a worker may run ahead (0)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--round-k", f.round_k, "kofn: pushes that close a round");
  app.add_option("--late", f.late, "kofn: late pushes are dropped or folded into the next round")
      ->check(CLI::IsMember({"drop", "fold"}));
  app.add_option("--slow-worker", f.slow, "RANK:FACTOR: worker RANK takes FACTOR times as long");
  app.add_option("--server-rule", f.rule, "server update rule: sgd, adagrad, adam, adamw "
                                          "(default: --optimizer)")
      ->check(CLI::IsMember({"sgd", "adagrad", "adam", "adamw"}));
  app.add_option("--replicas", f.replicas,
                 "servers keeping each shard, as a chain: writes at the head, reads at the "
                 "tail, fail-over when one dies (1)");
  app.get_option("--resume")->description(
      "resume from the servers' checkpoint: a --save-dir or one of its step-N directories");
  app.add_option("--save-dir", f.save_dir,
                 "each server saves its shard (parameters, optimizer state, rounds) under "
                 "DIR/step-N/ at the end (and every --save-every steps)");
  app.add_option("--save-every", f.save_every, "with --save-dir: also every N steps");
  app.add_flag("--hot-keys", f.hot_keys,
               "dlrm, bsp/ssp: servers replicate their most-pulled rows to the other "
               "servers, workers read them there");
  app.add_option("--hot-every", f.hot_every, "--hot-keys: workers refresh hot sets every N steps (10)");
  app.add_option("--hot-max-rows", f.hot_max_rows, "--hot-keys: the most rows a server makes hot (32)");
  app.add_option("--kill-server", f.kill_server,
                 "fault injection (tests, bench/ps_failover.sh): SERVER:STEP kills server "
                 "SERVER (0-based) just before worker 0 pushes step STEP; repeatable; with "
                 "--replicas >= 2 the job goes on");
  app.add_option("--ps-timeout", f.timeout_s, "seconds any parameter-server wait may take (300)")
      ->check(CLI::PositiveNumber);
  try {
    app.parse(argc - 1, argv + 1);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  check_flags(f);
  const int world = f.placement == "dedicated" ? f.workers + f.servers : f.workers;
  if (job_world_from_env() > 1) {
    comm::JobEnv env = comm::bootstrap_from_env(std::chrono::milliseconds(int64_t(f.timeout_s * 1000)));
    return run_rank({env.rank, env.size, env.store, env.secret}, f);
  }
  return launch::run_forked("braid ps", world, [&](const launch::ForkedRank& r) {
    return run_rank({r.rank, r.size, make_file_store(r.store_dir, r.size), r.secret}, f);
  });
}

}  // namespace braid::tool
