// braid train mlp|gpt --dp N — data-parallel training.
//
// train_cmd.cc hands over here when --dp/--zero (or another data-parallel
// flag) is given, or when this process is a rank of a job started by braid
// run, torchrun, mpirun or srun. Started plainly with --dp N, it forks N
// ranks itself under launch::Supervisor (they meet through a private file
// store): when one fails, the others are stopped and one line names it. Under
// a launcher it joins the job it is given (Communicator::from_env).
//
// Rank 0 shows the progress bar and writes the JSON log; each step's loss
// is over the whole global batch; step records carry every rank's
// compute_s / exposed_comm_s / idle_s (arrays indexed by rank); the done
// record says whether rank 0's gradient buckets lie in shared memory
// (`shared_buckets`; --private-buckets turns them private).
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "braid/checkpoint.h"
#include "braid/comm.h"
#include "braid/dp_trainer.h"
#include "braid/env.h"
#include "braid/error.h"
#include "braid/kernels.h"
#include "braid/models.h"
#include "braid/supervisor.h"
#include "subcommands.h"
#include "train_report.h"
#include "train_setup.h"

namespace braid::tool {

namespace {

struct DpFlags : TrainFlags {
  // data parallel
  int dp = 0;
  int zero = 0;
  double bucket_mb = 25, first_bucket_mb = 1;
  bool no_overlap = false, bf16_grads = false, private_buckets = false;
  std::string bucket_reduce = "auto";
  double ref_throughput = 0;
  std::string transport;
};

int run_rank(std::shared_ptr<Communicator> comm, DpFlags f) {
  const int rank = comm->rank(), world = comm->size();
  const bool mlp = f.model == "mlp";
  apply_threads(f, comm->host_size(), rank == 0);
  resume_after_restart(f, rank == 0);
  apply_model_defaults(f);

  TrainSetup setup = build_setup(f, rank == 0);
  std::unique_ptr<nn::Dataset>& train = setup.train;
  std::unique_ptr<nn::Dataset>& test = setup.test;
  std::unique_ptr<nn::Sequential>& model = setup.model;
  const int64_t nparams = nn::count_parameters(model->parameters());

  const int64_t steps = setup.steps;
  parallel::DpOptions dpo;
  dpo.zero = f.zero;
  dpo.bucket_bytes = size_t(f.bucket_mb * 1048576.0);
  dpo.first_bucket_bytes = size_t(f.first_bucket_mb * 1048576.0);
  dpo.overlap = !f.no_overlap;
  dpo.reduce = f.bucket_reduce == "background" ? parallel::DpOptions::Reduce::kBackground
               : f.bucket_reduce == "inline"   ? parallel::DpOptions::Reduce::kInline
                                               : parallel::DpOptions::Reduce::kAuto;
  dpo.bf16_grads = f.bf16_grads;
  dpo.shared_buckets = !f.private_buckets;
  parallel::DpTrainer trainer(comm, *model, *train, *setup.opt, setup.sched, setup.opts, dpo);
  if (setup.loss) trainer.trainer().set_loss(*setup.loss);
  if (!f.resume.empty()) trainer.load(f.resume);

  const bool logger = rank == 0;
  std::ofstream jlog = open_json_log(f, logger);
  if (logger && !f.quiet)
    std::fprintf(stderr,
                 "braid train %s: %lld parameters, %lld steps, global batch %lld, %s lr %g, "
                 "dp %d x %d thread%s, ZeRO-%d%s%s%s\n",
                 f.model.c_str(), (long long)nparams, (long long)steps, (long long)f.batch,
                 f.optimizer.c_str(), f.lr, world, f.threads, f.threads > 1 ? "s" : "", f.zero,
                 f.no_overlap ? ", plain all-reduce (no buckets, no overlap)" : "",
                 f.no_overlap                        ? ""
                 : trainer.dp().background_reduce() ? ", buckets reduced in the background"
                                                     : ", buckets reduced inline (no spare core)",
                 f.bf16_grads ? ", bf16 gradients" : "");

  const int64_t first = trainer.next_step();
  // Throughput excludes the first 20 steps (a fifth of shorter runs).
  StepReporter report(f, first, steps, std::min<int64_t>(20, steps / 5), logger);
  double last_loss = 0;
  std::vector<double> comm_sum(size_t(world), 0), step_sum(size_t(world), 0);
  for (int64_t s = first; s < steps; ++s) {
    nn::StepStats st = trainer.step();
    last_loss = st.loss;
    const auto& times = trainer.rank_times();
    if (report.measured(s))
      for (int r = 0; r < world; ++r) {
        comm_sum[size_t(r)] += times[size_t(r)].exposed_comm_s;
        step_sum[size_t(r)] += times[size_t(r)].step_s();
      }
    report.after_step(s, st, times[0].exposed_comm_s / std::max(1e-12, times[0].step_s()));
    if (jlog.is_open())
      log_step_per_rank(jlog, st, times,
                        {{"compute_s", &parallel::DpStepTimes::compute_s},
                         {"exposed_comm_s", &parallel::DpStepTimes::exposed_comm_s},
                         {"idle_s", &parallel::DpStepTimes::idle_s}});
    if (checkpoint_due(f, s)) trainer.save(f.checkpoint);
  }
  const double throughput = report.finish();
  if (!f.checkpoint.empty()) trainer.save(f.checkpoint);

  auto mem = trainer.memory();
  nlohmann::json done = done_record(f, steps, last_loss, report.seconds(), throughput);
  done.update({{"dp", world},
               {"zero", f.zero},
               {"plain", f.no_overlap},
               {"overlap", !f.no_overlap && trainer.dp().background_reduce()},
               {"bf16_grads", f.bf16_grads},
               {"buckets", trainer.dp().num_buckets()},
               {"shared_buckets", trainer.dp().shared_buckets()},
               {"param_bytes", mem.param_bytes},
               {"grad_bytes", mem.grad_bytes},
               {"optim_bytes", mem.optim_bytes},
               {"state_bytes", mem.total()},
               {"peak_transient_bytes", mem.peak_transient_bytes},
               // parameters, gradients and one f32 per parameter per optimizer slot
               {"single_process_state_bytes",
                nparams * 4 * (2 + int64_t(setup.opt->state_per_param()))}});
  nlohmann::json frac = nlohmann::json::array();
  double frac_max = 0;
  for (int r = 0; r < world; ++r) {
    double v = step_sum[size_t(r)] > 0 ? comm_sum[size_t(r)] / step_sum[size_t(r)] : 0;
    frac.push_back(v);
    frac_max = std::max(frac_max, v);
  }
  done["exposed_comm_fraction"] = frac;
  if (f.ref_throughput > 0) done["scaling_factor"] = throughput / (double(world) * f.ref_throughput);
  double acc = -1;
  if (mlp) {
    acc = trainer.evaluate(*test, 1000).accuracy;
    done["test_accuracy"] = acc;
  }
  const std::string dlrm =
      f.model == "dlrm" ? dlrm_summary(*test, trainer.evaluate(*test, 1000), done) : "";
  done["peak_rss_bytes"] = peak_rss_bytes();
  done["peak_tensor_bytes"] = tensor_peak_bytes();  // braid/tensor.h
  done["precision"] = f.precision;  // braid/precision.h
  if (logger) {
    if (jlog.is_open()) jlog << done.dump() << '\n';
    std::printf("done: %s %lld steps on %d rank%s (ZeRO-%d), final loss %.4f, %s %s",
                f.model.c_str(), (long long)steps, world, world > 1 ? "s" : "", f.zero, last_loss,
                human(throughput).c_str(), report.unit());
    if (mlp) std::printf(", test accuracy %.4f", acc);
    std::printf("%s", dlrm.c_str());
    std::printf(", exposed comm %.1f%%", 100.0 * frac_max);
    if (f.ref_throughput > 0)
      std::printf(", speed-up %.2fx over 1 rank (scaling factor %.2f)",
                  throughput / f.ref_throughput, throughput / (double(world) * f.ref_throughput));
    std::printf(", %.1fs\n", report.seconds());
    std::fflush(stdout);
  }
  comm->barrier();
  return 0;
}

}  // namespace

bool dp_requested(int argc, char** argv) {
  return has_any_flag(argc, argv,
                      {"--dp", "--zero", "--bf16-grads", "--no-overlap", "--plain",
                       "--bucket-reduce", "--bucket-mb", "--private-buckets",
                       "--first-bucket-mb", "--ref-throughput"}) ||
         job_world_from_env() > 1;
}

int train_dp_main(int argc, char** argv) {
  CLI::App app{"braid train: train a model, data parallel", "braid train"};
  DpFlags f;
  add_train_options(app, f, true);
  app.add_option("--dp", f.dp, "data-parallel ranks to start (under a launcher: the job's size)")
      ->check(CLI::PositiveNumber);
  app.add_option("--zero", f.zero, "ZeRO stage: 0 none, 1 optimizer state, 2 +gradients, "
                                   "3 +parameters sharded")
      ->check(CLI::Range(0, 3));
  app.add_option("--bucket-mb", f.bucket_mb, "gradient bucket size in MiB (25)");
  app.add_option("--first-bucket-mb", f.first_bucket_mb, "first bucket size in MiB (1)");
  app.add_flag("--plain,--no-overlap", f.no_overlap,
               "plain scheme: one all_reduce per parameter after backward (ZeRO 0)");
  app.add_option("--bucket-reduce", f.bucket_reduce,
                 "where full buckets are reduced: background (worker thread, overlapping "
                 "backward), inline (training thread, blocking), or auto: background when "
                 "the host has a core to spare for it")
      ->check(CLI::IsMember({"auto", "background", "inline"}));
  app.add_flag("--bf16-grads", f.bf16_grads, "communicate gradients in bf16");
  app.add_flag("--private-buckets", f.private_buckets,
               "gradient buckets in private memory, reduced through the transport's staging "
               "buffers (default: in shared memory, reduced straight out of the peers' buckets)");
  app.add_option("--ref-throughput", f.ref_throughput,
                 "1-rank samples/s (tokens/s) to report the scaling factor against");
  app.add_option("--transport", f.transport, "auto, shm or tcp (forked ranks)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  // Only ZeRO 0/1 buckets of f32 gradients are ever in shared memory.
  if (f.private_buckets) {
    const char* other = f.no_overlap ? "--plain (no buckets)"
                        : f.zero >= 2 ? "--zero 2 and 3 (sharded gradients)"
                        : f.bf16_grads ? "--bf16-grads (sent from a staging copy)"
                                       : nullptr;
    if (other != nullptr)
      throw Error(Errc::kInvalidArgument,
                  std::string("--private-buckets applies to the shared-memory gradient buckets "
                              "of ZeRO 0/1 with f32 gradients; with ") +
                      other + " the gradients are in private memory already");
  }
  const int job = job_world_from_env();
  if (job > 1) {
    if (f.dp > 0 && f.dp != job)
      throw Error(Errc::kInvalidArgument, "--dp " + std::to_string(f.dp) +
                                              " but the launcher started " + std::to_string(job) +
                                              " ranks");
    return run_rank(Communicator::from_env(), f);
  }
  if (f.dp <= 1) return run_rank(Communicator::from_env(), f);
  // Started plainly: f.dp ranks forked under the supervisor, meeting in a private store.
  CommOptions co;
  co.transport = f.transport;
  return launch::run_forked("braid train", f.dp, [&](const launch::ForkedRank& r) {
    return run_rank(r.communicator(co), f);
  });
}

}  // namespace braid::tool
