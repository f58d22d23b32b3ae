// braid train mlp|gpt — single-process training with a progress bar, a
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
#include "train_setup.h"

namespace braid::tool {

namespace {

struct Flags {
  std::string model;
  int64_t steps = 0, epochs = 0, batch = 0;
  double lr = -1;
  uint64_t seed = 1;
  int threads = 1;
  std::string json_log;
  std::string optimizer;
  double momentum = 0.9, weight_decay = -1, clip = 0;
  int64_t warmup = 0;
  bool cosine = false;
  int accum = 1;
  std::string checkpoint, resume, init_from, save_init;
  int64_t checkpoint_every = 0;
  std::string data_dir, data;
  int64_t layers = 4, d_model = 256, heads = 4, context = 128;
  float dropout = 0;
  bool recompute = false;
  int64_t log_every = 0;
  bool quiet = false;
};

std::string human(double v) {
  char b[32];
  if (v >= 1e6) std::snprintf(b, sizeof b, "%.2fM", v / 1e6);
  else if (v >= 1e3) std::snprintf(b, sizeof b, "%.1fk", v / 1e3);
  else std::snprintf(b, sizeof b, "%.1f", v);
  return b;
}

std::string eta_str(double s) {
  char b[32];
  if (s < 0 || !std::isfinite(s)) return "?";
  if (s >= 3600) std::snprintf(b, sizeof b, "%dh%02dm", int(s / 3600), int(s / 60) % 60);
  else if (s >= 60) std::snprintf(b, sizeof b, "%dm%02ds", int(s / 60), int(s) % 60);
  else std::snprintf(b, sizeof b, "%.0fs", s);
  return b;
}

}  // namespace

int train_main(int argc, char** argv) {
  if (dp_requested(argc, argv)) return train_dp_main(argc, argv);  // data parallel: train_dp.cc
  CLI::App app{"braid train: train a model in one process", "braid train"};
  Flags f;
  app.add_option("model", f.model, "mlp (784-512-512-10 on Fashion-MNIST) or gpt (byte-level)")
      ->required()
      ->check(CLI::IsMember({"mlp", "gpt"}));
  app.add_option("--steps", f.steps, "optimizer steps (overrides --epochs)");
  app.add_option("--epochs", f.epochs, "passes over the training set (mlp default 2)");
  app.add_option("--batch", f.batch, "global batch in samples (mlp 256, gpt 16)");
  app.add_option("--lr", f.lr, "peak learning rate (mlp 0.05, gpt 1e-3)");
  app.add_option("--seed", f.seed, "seed for initialisation, data order and dropout");
  app.add_option("--threads", f.threads, "compute threads (OpenBLAS and OpenMP)")
      ->check(CLI::PositiveNumber);
  app.add_option("--json-log", f.json_log, "write one JSON object per step to FILE");
  app.add_option("--optimizer", f.optimizer, "sgd or adamw (mlp sgd, gpt adamw)")
      ->check(CLI::IsMember({"sgd", "adamw"}));
  app.add_option("--momentum", f.momentum, "SGD momentum (0.9)");
  app.add_option("--weight-decay", f.weight_decay, "weight decay (sgd 0, adamw 0.01)");
  app.add_option("--warmup", f.warmup, "linear warmup steps");
  app.add_flag("--cosine", f.cosine, "cosine decay to 10% of --lr at the last step");
  app.add_option("--clip", f.clip, "clip gradients to this global norm (0: off)");
  app.add_option("--accum", f.accum, "micro-batches per step (gradient accumulation)")
      ->check(CLI::PositiveNumber);
  app.add_option("--checkpoint", f.checkpoint, "write a checkpoint here at the end");
  app.add_option("--checkpoint-every", f.checkpoint_every, "and every N steps");
  app.add_option("--resume", f.resume, "resume from this checkpoint");
  app.add_option("--init-from", f.init_from, "load initial weights (model/*) from a checkpoint");
  app.add_option("--save-init", f.save_init, "write the initial weights to a checkpoint");
  app.add_option("--data-dir", f.data_dir, "Fashion-MNIST idx directory (mlp)");
  app.add_option("--data", f.data, "text file to train on (gpt; default " +
                                       nn::ByteText::default_path() + ")");
  app.add_option("--layers", f.layers, "gpt: transformer blocks (4)");
  app.add_option("--d-model", f.d_model, "gpt: model width (256)");
  app.add_option("--heads", f.heads, "gpt: attention heads (4)");
  app.add_option("--context", f.context, "gpt: context length in bytes (128)");
  app.add_option("--dropout", f.dropout, "gpt: dropout probability (0)");
  app.add_flag("--recompute", f.recompute, "gpt: recompute block activations in backward");
  app.add_option("--log-every", f.log_every, "plain-text log interval (default: ~20 lines)");
  app.add_flag("-q,--quiet", f.quiet, "only the summary line");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  const bool mlp = f.model == "mlp";
  set_num_threads(f.threads);
  apply_model_defaults(f);

  // Data and model.
  TrainSetup setup = build_setup(f, true);
  std::unique_ptr<nn::Dataset>& train = setup.train;
  std::unique_ptr<nn::Dataset>& test = setup.test;
  std::unique_ptr<nn::Sequential>& model = setup.model;
  auto params = model->parameters();

  nn::TrainOptions opts;
  opts.global_batch = f.batch;
  opts.accum = f.accum;
  opts.clip = f.clip;
  opts.seed = f.seed;
  nn::Sampler probe(train->size(), f.batch, f.seed);
  int64_t steps = f.steps;
  if (steps <= 0) steps = (f.epochs > 0 ? f.epochs : (mlp ? 2 : 0)) * probe.steps_per_epoch();
  if (steps <= 0) steps = 200;  // gpt default
  nn::LrSchedule sched;
  sched.base = float(f.lr);
  sched.warmup = f.warmup;
  sched.cosine = f.cosine;
  sched.total = steps;
  std::unique_ptr<nn::Optimizer> opt;
  if (f.optimizer == "sgd")
    opt = std::make_unique<nn::Sgd>(float(f.momentum), float(f.weight_decay));
  else
    opt = std::make_unique<nn::AdamW>(0.9f, 0.999f, 1e-8f, float(f.weight_decay));
  nn::Trainer trainer(*model, *train, *opt, sched, opts);
  if (!f.resume.empty()) trainer.load(f.resume);

  // Reporting (rank 0 only once data parallelism exists).
  const bool is_logger = opts.rank == 0;
  std::ofstream jlog;
  if (is_logger && !f.json_log.empty()) {
    jlog.open(f.json_log);
    if (!jlog) throw Error(Errc::kIo, "cannot open --json-log " + f.json_log);
  }
  const bool tty = ::isatty(STDERR_FILENO) && !f.quiet;
  const int64_t log_every = f.log_every > 0 ? f.log_every : std::max<int64_t>(1, steps / 20);
  const int64_t per_sample_units = mlp ? 1 : f.context;  // samples or tokens per sample
  const char* unit = mlp ? "samples/s" : "tokens/s";
  const int64_t kWarm = 20;  // throughput excludes the first 20 steps

  if (is_logger && !f.quiet)
    std::fprintf(stderr, "braid train %s: %lld parameters, %lld steps, batch %lld, %s lr %g, %d thread%s\n",
                 f.model.c_str(), (long long)nn::count_parameters(params), (long long)steps,
                 (long long)f.batch, f.optimizer.c_str(), f.lr, f.threads, f.threads > 1 ? "s" : "");

  const int64_t first = trainer.next_step();
  double t0 = now_s(), t_warm = t0;
  int64_t warm_step = first;
  nn::StepStats st;
  double last_loss = 0;
  for (int64_t s = first; s < steps; ++s) {
    st = trainer.step();
    last_loss = st.loss;
    if (!std::isfinite(st.loss))
      throw Error(Errc::kInvalidArgument, "loss became " + std::to_string(st.loss) + " at step " +
                                              std::to_string(st.step) + " (lower --lr?)");
    double now = now_s();
    if (s + 1 - first == kWarm) {
      t_warm = now;
      warm_step = s + 1;
    }
    if (is_logger) {
      if (jlog.is_open())
        jlog << nlohmann::json{{"step", st.step}, {"loss", st.loss}, {"lr", st.lr},
                               {"grad_norm", st.grad_norm}}
                    .dump()
             << '\n';
      int64_t done = s + 1 - first;
      double rate = double(done) * double(f.batch * per_sample_units) / (now - t0);
      double eta = double(steps - s - 1) * (now - t0) / double(done);
      if (tty) {
        int width = 24, fill = int(double(s + 1) / double(steps) * width);
        std::string bar(size_t(fill), '=');
        if (fill < width) bar += '>' + std::string(size_t(width - fill - 1), ' ');
        std::fprintf(stderr, "\r  step %lld/%lld [%s] loss %.4f | %s %s | ETA %s   ",
                     (long long)(s + 1), (long long)steps, bar.c_str(), st.loss,
                     human(rate).c_str(), unit, eta_str(eta).c_str());
        std::fflush(stderr);
      } else if (!f.quiet && ((s + 1) % log_every == 0 || s + 1 == steps)) {
        std::printf("step %lld/%lld loss %.4f lr %.4g %s %s eta %s\n", (long long)(s + 1),
                    (long long)steps, st.loss, st.lr, human(rate).c_str(), unit,
                    eta_str(eta).c_str());
        std::fflush(stdout);
      }
    }
    if (!f.checkpoint.empty() && f.checkpoint_every > 0 && (s + 1) % f.checkpoint_every == 0)
      trainer.save(f.checkpoint);
  }
  double t_end = now_s();
  if (tty) std::fprintf(stderr, "\n");
  int64_t measured = steps - warm_step;
  double secs = t_end - t_warm;
  if (measured <= 0) {  // fewer than 20 steps: use them all
    measured = steps - first;
    secs = t_end - t0;
  }
  double throughput = secs > 0 ? double(measured * f.batch * per_sample_units) / secs : 0;
  if (!f.checkpoint.empty()) trainer.save(f.checkpoint);

  nlohmann::json done{{"event", "done"},
                      {"model", f.model},
                      {"steps", steps},
                      {"final_loss", last_loss},
                      {"train_seconds", t_end - t0},
                      {"threads", f.threads},
                      {"peak_rss_bytes", peak_rss_bytes()}};
  done[mlp ? "samples_per_s" : "tokens_per_s"] = throughput;
  double acc = -1;
  if (mlp) {
    acc = trainer.evaluate(*test, f.batch).accuracy;
    done["test_accuracy"] = acc;
  }
  done["peak_rss_bytes"] = peak_rss_bytes();
  if (is_logger) {
    if (jlog.is_open()) jlog << done.dump() << '\n';
    std::printf("done: %s %lld steps, final loss %.4f, %s %s", f.model.c_str(), (long long)steps,
                last_loss, human(throughput).c_str(), unit);
    if (mlp) std::printf(", test accuracy %.4f", acc);
    std::printf(", peak RSS %.1f MiB, %.1fs\n", double(peak_rss_bytes()) / 1048576.0, t_end - t0);
  }
  return 0;
}

}  // namespace braid::tool
