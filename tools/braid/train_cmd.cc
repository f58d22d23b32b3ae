// braid train mlp|gpt|dlrm — single-process training with a progress bar, a
// JSON-lines log and checkpoints. The loop itself is nn::Trainer; this file
// only parses flags, builds the model and data, and reports.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "braid/checkpoint.h"
#include "braid/env.h"
#include "braid/error.h"
#include "braid/kernels.h"
#include "braid/models.h"
#include "braid/trainer.h"
#include "subcommands.h"
#include "train_report.h"
#include "train_setup.h"

namespace braid::tool {

namespace {

using Flags = TrainFlags;



}  // namespace

int train_main(int argc, char** argv) {
  if (hybrid_requested(argc, argv)) return train_hybrid_main(argc, argv);  // train_hybrid.cc
  if (auto_requested(argc, argv)) return train_auto_main(argc, argv);  // the planner's: train_auto.cc
  if (mp_requested(argc, argv)) return train_mp_main(argc, argv);  // model parallel: train_mp.cc
  if (dp_requested(argc, argv)) return train_dp_main(argc, argv);  // data parallel: train_dp.cc
  CLI::App app{"braid train: train a model in one process", "braid train"};
  Flags f;
  add_train_options(app, f, false);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  const bool mlp = f.model == "mlp";
  apply_threads(f, 1, true);
  resume_after_restart(f, true);
  apply_model_defaults(f);

  // Data and model.
  TrainSetup setup = build_setup(f, true);
  std::unique_ptr<nn::Dataset>& train = setup.train;
  std::unique_ptr<nn::Dataset>& test = setup.test;
  std::unique_ptr<nn::Sequential>& model = setup.model;
  auto params = model->parameters();

  const nn::TrainOptions& opts = setup.opts;
  const int64_t steps = setup.steps;
  nn::Trainer trainer(*model, *train, *setup.opt, setup.sched, opts);
  if (setup.loss) trainer.set_loss(*setup.loss);
  if (!f.resume.empty()) trainer.load(f.resume);

  // Reporting (rank 0 only once data parallelism exists).
  const bool is_logger = opts.rank == 0;
  std::ofstream jlog = open_json_log(f, is_logger);

  if (is_logger && !f.quiet)
    std::fprintf(stderr, "braid train %s: %lld parameters, %lld steps, batch %lld, %s lr %g, %d thread%s\n",
                 f.model.c_str(), (long long)nn::count_parameters(params), (long long)steps,
                 (long long)f.batch, f.optimizer.c_str(), f.lr, f.threads, f.threads > 1 ? "s" : "");

  const int64_t first = trainer.next_step();
  StepReporter report(f, first, steps, 20, is_logger);  // throughput excludes 20 steps
  double last_loss = 0;
  for (int64_t s = first; s < steps; ++s) {
    nn::StepStats st = trainer.step();
    last_loss = st.loss;
    report.after_step(s, st);
    if (jlog.is_open()) jlog << step_record(st).dump() << std::endl;  // flushed: see log_step_per_rank
    if (checkpoint_due(f, s)) trainer.save(f.checkpoint);
  }
  const double throughput = report.finish();
  if (!f.checkpoint.empty()) trainer.save(f.checkpoint);

  nlohmann::json done = done_record(f, steps, last_loss, report.seconds(), throughput);
  double acc = -1;
  if (mlp) {
    acc = trainer.evaluate(*test, f.batch).accuracy;
    done["test_accuracy"] = acc;
  }
  const std::string dlrm =
      f.model == "dlrm" ? dlrm_summary(*test, trainer.evaluate(*test, f.batch), done) : "";
  done["peak_rss_bytes"] = peak_rss_bytes();
  done["peak_tensor_bytes"] = tensor_peak_bytes();  // braid/tensor.h
  done["precision"] = f.precision;  // braid/precision.h
  if (is_logger) {
    if (jlog.is_open()) jlog << done.dump() << '\n';
    std::printf("done: %s %lld steps, final loss %.4f, %s %s", f.model.c_str(), (long long)steps,
                last_loss, human(throughput).c_str(), report.unit());
    if (mlp) std::printf(", test accuracy %.4f", acc);
    std::printf("%s", dlrm.c_str());
    std::printf(", peak RSS %.1f MiB, %.1fs\n", double(peak_rss_bytes()) / 1048576.0,
                report.seconds());
  }
  return 0;
}

}  // namespace braid::tool
