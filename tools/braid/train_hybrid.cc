// braid train dlrm --embeddings sharded|--table-optimizer … — the DLRM with
// row-wise table optimizers: its embedding tables sharded over --dp ranks
// (model parallel) beside data-parallel MLPs (parallel::HybridDlrmTrainer,
// braid/hybrid_dlrm.h), or, in one process, the same recipe with local
// tables (nn::DlrmRowwiseHooks, braid/dlrm_rowwise.h), the run the
// sharded one is compared with.
//
// train_cmd.cc hands over here when --embeddings, --shard,
// --table-optimizer or --table-memory-limit is given. The plan
// (parallel::plan_embeddings) is made, printed and checked before any rank
// is started, so a sharding that cannot be (a width that does not split,
// a rank over --table-memory-limit) is refused with nothing running.
// Started plainly, --dp ranks are forked (launch::run_forked, as --dp
// does); under a launcher the job's size is the world. Rank 0 prints and
// writes the JSON log; its done record adds the plan, every rank's table
// bytes and the exchange's share of the step time.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "braid/comm.h"
#include "braid/dlrm_rowwise.h"
#include "braid/embedding_plan.h"
#include "braid/error.h"
#include "braid/hybrid_dlrm.h"
#include "braid/supervisor.h"
#include "subcommands.h"
#include "train_report.h"
#include "train_setup.h"

namespace braid::tool {

namespace {

struct HybridFlags : TrainFlags {
  int dp = 1;
  std::string transport;
};

parallel::EmbeddingPlanOptions plan_options(const HybridFlags& f) {
  parallel::EmbeddingPlanOptions o;
  o.shard = f.dlrm.shard;
  o.row_state = nn::RowOptimizer::parse(f.dlrm.table_optimizer).has_state();
  o.memory_limit_bytes = int64_t(f.dlrm.table_memory_limit_mib * 1048576.0);
  return o;
}

// Refuses what this path does not do, naming the flag.
void settle(HybridFlags& f, int world) {
  auto reject = [](const std::string& why) { throw Error(Errc::kInvalidArgument, why); };
  if (f.model != "dlrm")
    reject("--embeddings, --shard, --table-optimizer and --table-memory-limit are for the dlrm "
           "model, not " + f.model);
  if (f.dlrm.embeddings != "sharded" && world > 1)
    reject("row-wise table optimizers with replicated tables run in one process only (the "
           "reference run); over " + std::to_string(world) + " ranks use --embeddings sharded");
  if (f.clip > 0) reject("--clip is not built with row-wise table optimizers");
  if (!f.init_from.empty() || !f.save_init.empty())
    reject("--init-from and --save-init are not built for row-wise table optimizers (--resume "
           "takes any checkpoint of the serial layout)");
  apply_model_defaults(f);
  if (f.batch < world)
    reject("--batch " + std::to_string(f.batch) + " gives some of the " + std::to_string(world) +
           " ranks no samples");
}

nlohmann::json plan_json(const parallel::EmbeddingPlan& plan) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& t : plan.tables) a.push_back(parallel::sharding_name(t.kind));
  return a;
}

// One process: local tables, the row-wise optimizer over their touched rows.
int run_serial(HybridFlags f) {
  apply_threads(f, 1, true);
  resume_after_restart(f, true);
  TrainSetup setup = data_setup(f);
  auto model = nn::make_dlrm(dlrm_model_config(f.dlrm), f.seed);
  nn::DlrmRowwiseHooks hooks(*model, nn::RowOptimizer::parse(f.dlrm.table_optimizer));
  nn::Trainer trainer(*model, *setup.train, *setup.opt, setup.sched, setup.opts);
  trainer.set_hooks(hooks);
  trainer.set_loss(*setup.loss);
  if (!f.resume.empty()) hooks.load(f.resume, trainer, *setup.opt);
  std::ofstream jlog = open_json_log(f, true);
  if (!f.quiet)
    std::fprintf(stderr,
                 "braid train dlrm: one process, %lld steps, batch %lld, MLPs %s lr %g, tables "
                 "row-wise %s (%.1f MiB)\n",
                 (long long)setup.steps, (long long)f.batch, f.optimizer.c_str(), f.lr,
                 f.dlrm.table_optimizer.c_str(), double(hooks.table_bytes()) / 1048576.0);
  const int64_t first = trainer.next_step();
  StepReporter report(f, first, setup.steps, std::min<int64_t>(20, setup.steps / 5), true);
  double last_loss = 0;
  for (int64_t s = first; s < setup.steps; ++s) {
    const nn::StepStats st = trainer.step();
    last_loss = st.loss;
    report.after_step(s, st);
    if (jlog.is_open()) jlog << step_record(st).dump() << std::endl;
    if (checkpoint_due(f, s)) hooks.save(f.checkpoint, trainer, *setup.opt);
  }
  const double throughput = report.finish();
  if (!f.checkpoint.empty()) hooks.save(f.checkpoint, trainer, *setup.opt);
  nlohmann::json done = done_record(f, setup.steps, last_loss, report.seconds(), throughput);
  const std::string dlrm = dlrm_summary(*setup.test, trainer.evaluate(*setup.test, 1000), done);
  done.update({{"embeddings", "local"},
               {"table_optimizer", f.dlrm.table_optimizer},
               {"table_bytes_total", hooks.table_bytes()},
               {"row_state_bytes_total", hooks.state_bytes()},
               {"peak_rss_bytes", peak_rss_bytes()}});
  if (jlog.is_open()) jlog << done.dump() << '\n';
  std::printf("done: dlrm %lld steps in one process, final loss %.4f, %s %s%s, %.1fs\n",
              (long long)setup.steps, last_loss, human(throughput).c_str(), report.unit(),
              dlrm.c_str(), report.seconds());
  return 0;
}

int run_rank(std::shared_ptr<Communicator> comm, HybridFlags f,
             const parallel::EmbeddingPlan& plan) {
  const int rank = comm->rank(), world = comm->size();
  const bool logger = rank == 0;
  apply_threads(f, comm->host_size(), logger);
  resume_after_restart(f, logger);
  TrainSetup setup = data_setup(f);
  parallel::DpOptions dpo;
  parallel::HybridDlrmTrainer trainer(comm, dlrm_model_config(f.dlrm), f.seed, plan,
                                      nn::RowOptimizer::parse(f.dlrm.table_optimizer), *setup.train,
                                      *setup.opt, setup.sched, setup.opts, dpo);
  trainer.set_loss(*setup.loss);
  if (!f.resume.empty()) trainer.load(f.resume);
  std::ofstream jlog = open_json_log(f, logger);
  if (logger && !f.quiet)
    std::fprintf(stderr,
                 "braid train dlrm: %lld steps, global batch %lld, %d ranks: MLPs data "
                 "parallel (%s lr %g), tables sharded (--shard %s, row-wise %s), %d thread%s "
                 "per rank\n",
                 (long long)setup.steps, (long long)f.batch, world, f.optimizer.c_str(), f.lr,
                 f.dlrm.shard.c_str(), f.dlrm.table_optimizer.c_str(), f.threads, f.threads > 1 ? "s" : "");
  struct Split {
    double compute_s, exposed_comm_s, idle_s, exchange_s;
  };
  const int64_t first = trainer.next_step();
  StepReporter report(f, first, setup.steps, std::min<int64_t>(20, setup.steps / 5), logger);
  double last_loss = 0, exchange_sum = 0, step_sum = 0;
  std::vector<Split> split(static_cast<size_t>(world));
  for (int64_t s = first; s < setup.steps; ++s) {
    const nn::StepStats st = trainer.step();
    last_loss = st.loss;
    const parallel::DpStepTimes& t = trainer.rank_times()[size_t(rank)];
    if (report.measured(s)) {
      exchange_sum += trainer.exchange_s();
      step_sum += t.step_s();
    }
    report.after_step(s, st);
    if (jlog.is_open()) {
      // The DP exchange already carries every rank's split; the table
      // exchange's seconds are this rank's (rank 0's).
      for (int r = 0; r < world; ++r) {
        const auto& q = trainer.rank_times()[size_t(r)];
        split[size_t(r)] = {q.compute_s, q.exposed_comm_s, q.idle_s, 0};
      }
      split[0].exchange_s = trainer.exchange_s();
      log_step_per_rank(jlog, st, split,
                        {{"compute_s", &Split::compute_s},
                         {"exposed_comm_s", &Split::exposed_comm_s},
                         {"idle_s", &Split::idle_s}});
    }
    if (checkpoint_due(f, s)) trainer.save(f.checkpoint);
  }
  const double throughput = report.finish();
  if (!f.checkpoint.empty()) trainer.save(f.checkpoint);
  const nn::EvalStats ev = trainer.evaluate(*setup.test, 1000);
  // Every rank's table and row-state bytes (rank order: [tables, state]).
  const int64_t mine[2] = {trainer.tables().table_bytes(), trainer.tables().state_bytes()};
  std::vector<int64_t> gathered(static_cast<size_t>(2 * world));
  comm->all_gather(mine, gathered.data(), 2, DType::kI64);
  std::vector<int64_t> bytes, state;
  for (int r = 0; r < world; ++r) {
    bytes.push_back(gathered[size_t(2 * r)]);
    state.push_back(gathered[size_t(2 * r + 1)]);
  }
  int64_t total = 0;
  for (int64_t b : bytes) total += b;
  const int64_t most = *std::max_element(bytes.begin(), bytes.end());
  nlohmann::json done = done_record(f, setup.steps, last_loss, report.seconds(), throughput);
  const std::string dlrm = dlrm_summary(*setup.test, ev, done);
  done.update({{"dp", world},
               {"embeddings", "sharded"},
               {"shard", f.dlrm.shard},
               {"plan", plan_json(plan)},
               {"table_optimizer", f.dlrm.table_optimizer},
               {"table_bytes_per_rank", bytes},
               {"table_bytes_total", total},
               {"row_state_bytes_per_rank", state},
               // the largest rank's tables over an even 1/world share
               {"table_bytes_max_over_even", double(most) * world / double(total)},
               {"mlp_parameters", trainer.mlp_parameters()},
               {"exchange_fraction", step_sum > 0 ? exchange_sum / step_sum : 0.0},
               {"peak_rss_bytes", peak_rss_bytes()}});
  if (logger) {
    if (jlog.is_open()) jlog << done.dump() << '\n';
    std::printf("done: dlrm %lld steps on %d ranks (tables sharded), final loss %.4f, %s %s%s, "
                "tables %.1f MiB on the largest rank of %.1f MiB (x%.3f of an even share), "
                "exchange %.1f%%, %.1fs\n",
                (long long)setup.steps, world, last_loss, human(throughput).c_str(),
                report.unit(), dlrm.c_str(), double(most) / 1048576.0, double(total) / 1048576.0,
                double(most) * world / double(total),
                100.0 * (step_sum > 0 ? exchange_sum / step_sum : 0.0), report.seconds());
    std::fflush(stdout);
  }
  comm->barrier();
  return 0;
}

}  // namespace

bool hybrid_requested(int argc, char** argv) {
  return has_any_flag(argc, argv,
                      {"--embeddings", "--shard", "--table-optimizer", "--table-memory-limit"});
}

int train_hybrid_main(int argc, char** argv) {
  CLI::App app{"braid train dlrm: tables sharded over ranks, MLPs data parallel",
               "braid train"};
  HybridFlags f;
  add_train_options(app, f, true);
  app.add_option("--dp", f.dp, "ranks to start (under a launcher: the job's size)")
      ->check(CLI::PositiveNumber);
  app.add_option("--transport", f.transport, "auto, shm or tcp (forked ranks)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (app.count("--auto") > 0)
    throw Error(Errc::kInvalidArgument,
                "--auto plans dp/tp/pp for gpt and mlp; it does not plan sharded tables (use "
                "--shard auto)");
  const int job = job_world_from_env();
  if (job > 1 && f.dp > 1 && f.dp != job)
    throw Error(Errc::kInvalidArgument, "--dp " + std::to_string(f.dp) +
                                            " but the launcher started " + std::to_string(job) +
                                            " ranks");
  const int world = job > 1 ? job : f.dp;
  settle(f, world);
  if (f.dlrm.embeddings != "sharded") return run_serial(f);
  // The plan, before any rank starts: its errors stop the run here.
  const parallel::EmbeddingPlan plan =
      parallel::plan_embeddings(dlrm_model_config(f.dlrm), world, plan_options(f));
  if (!f.quiet && (job <= 1 || job_rank_from_env() == 0))
    std::fprintf(stderr, "embedding plan (--shard %s) over %d rank%s:\n%s", f.dlrm.shard.c_str(),
                 world, world > 1 ? "s" : "", plan.describe().c_str());
  if (job > 1 || world == 1) return run_rank(Communicator::from_env(), f, plan);
  CommOptions co;
  co.transport = f.transport;
  return launch::run_forked("braid train", world, [&](const launch::ForkedRank& r) {
    return run_rank(r.communicator(co), f, plan);
  });
}

}  // namespace braid::tool
