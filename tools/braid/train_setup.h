// What `braid train` and `braid train --dp` share before a run: the flags,
// the model-specific defaults, and the data sets, model spec and model
// built from them. What a run reports (progress, the JSON log, the done
// record) and how it resumes after a restart is train_report.h.
// Templates over the commands' flag structs (same field names).
#pragma once


#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "braid/checkpoint.h"
#include "braid/data.h"
#include "braid/env.h"
#include "braid/error.h"
#include "braid/job.h"
#include "braid/kernels.h"
#include "braid/model_spec.h"
#include "braid/models.h"
#include "braid/module.h"
#include "braid/optim.h"
#include "braid/precision.h"
#include "braid/threads.h"
#include "braid/trainer.h"
#include "train_dlrm.h"
#include "train_moe.h"

namespace braid::tool {

// Flags both `braid train` and `braid train --dp` take.
struct TrainFlags {
  std::string model;
  int64_t steps = 0, epochs = 0, batch = 0;
  double lr = -1;
  uint64_t seed = 1;
  int threads = 0;  // 0: choose_threads decides (braid/threads.h)
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
  std::string precision = "fp32";  // braid/precision.h
  int64_t log_every = 0;
  bool quiet = false;
  DlrmFlags dlrm;
  MoeFlags moe;
  int64_t restart = 0;  // BRAID_RESTART_COUNT (resume_after_restart)
};

// Registers the shared flags; `dp` words the help for a multi-rank job.
inline void add_train_options(CLI::App& app, TrainFlags& f, bool dp) {
  app.add_option("model", f.model,
                 "mlp (784-512-512-10 on Fashion-MNIST), gpt (byte-level) or dlrm (click data)")
      ->required()
      ->check(CLI::IsMember({"mlp", "gpt", "dlrm"}));
  app.add_option("--steps", f.steps, "optimizer steps (overrides --epochs)");
  app.add_option("--epochs", f.epochs, "passes over the training set (mlp default 2, dlrm 1)");
  app.add_option("--batch", f.batch,
                 dp ? "GLOBAL batch in samples, split across ranks (mlp and dlrm 256, gpt 16)"
                    : "global batch in samples (mlp and dlrm 256, gpt 16)");
  app.add_option("--lr", f.lr, "peak learning rate (mlp 0.05, gpt 1e-3, dlrm 0.1)");
  app.add_option("--seed", f.seed, "seed for initialisation, data order and dropout");
  app.add_option("--threads", f.threads,
                 std::string(dp ? "compute threads per rank" : "compute threads (OpenMP and the BLAS)") +
                     " (default: OMP_NUM_THREADS, else the cores this process may use" +
                     (dp ? " / ranks on the host)" : ")"))
      ->check(CLI::PositiveNumber);
  app.add_option("--json-log", f.json_log,
                 dp ? "rank 0 writes one JSON object per step to FILE"
                    : "write one JSON object per step to FILE");
  app.add_option("--optimizer", f.optimizer, "sgd or adamw (mlp and dlrm sgd, gpt adamw)")
      ->check(CLI::IsMember({"sgd", "adamw"}));
  app.add_option("--momentum", f.momentum, "SGD momentum (0.9)");
  app.add_option("--weight-decay", f.weight_decay, "weight decay (sgd 0, adamw 0.01)");
  app.add_option("--warmup", f.warmup, "linear warmup steps");
  app.add_flag("--cosine", f.cosine, "cosine decay to 10% of --lr at the last step");
  app.add_option("--clip", f.clip, "clip gradients to this global norm (0: off)");
  app.add_option("--accum", f.accum,
                 dp ? "micro-batches per rank per step (gradient accumulation)"
                    : "micro-batches per step (gradient accumulation)")
      ->check(CLI::PositiveNumber);
  app.add_option("--checkpoint", f.checkpoint, "write a checkpoint here at the end");
  app.add_option("--checkpoint-every", f.checkpoint_every, "and every N steps");
  app.add_option("--resume", f.resume,
                 dp ? "resume from a checkpoint (any dp size / ZeRO stage)"
                    : "resume from this checkpoint");
  app.add_option("--init-from", f.init_from, "load initial weights (model/*) from a checkpoint");
  app.add_option("--save-init", f.save_init, "write the initial weights to a checkpoint");
  app.add_option("--data-dir", f.data_dir, "Fashion-MNIST idx directory (mlp)");
  app.add_option("--data", f.data, "text file to train on (gpt; default " +
                                       nn::ByteText::default_path() + ")");
  app.add_option("--layers", f.layers, "gpt: transformer blocks (4)");
  app.add_option("--d-model", f.d_model, "gpt: model width (256)");
  app.add_option("--heads", f.heads, "gpt: attention heads (4)");
  app.add_option("--context", f.context, "gpt: context length in bytes (128)");
  app.add_option("--dropout", f.dropout,
                 "gpt: dropout probability, on the attention probabilities and each block's two outputs (0)");
  app.add_flag("--recompute", f.recompute, "gpt: recompute block activations in backward");
  app.add_option("--precision", f.precision,
                 "GEMM precision: fp32, bf16 (f32 accumulate) or fp16 (with dynamic loss "
                 "scaling); parameters, gradients and optimizer state stay fp32 (fp32)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  // Taken before these options are parsed (train_auto.cc); listed for --help.
  app.add_flag("--auto")->description(
      "gpt, mlp: pick dp/tp/pp, micro-batches, schedule and ZeRO with braid plan's model of "
      "this machine for the ranks given (--world, a launcher's job, else one per core), say "
      "why, and train so");
  app.add_option("--world")->description("with --auto, started plainly: ranks to plan for");
  app.add_option("--log-every", f.log_every, "plain-text log interval (default: ~20 lines)");
  app.add_flag("-q,--quiet", f.quiet, "only the summary line");
  add_dlrm_options(app, f.dlrm);
  add_moe_options(app, f.moe);
}

// Settles the compute thread count (--threads, else the environment, else
// the cores over `ranks_sharing`), applies it and writes it back to
// f.threads; `speaker` prints the note when an environment setting is
// overridden.
inline void apply_threads(TrainFlags& f, int ranks_sharing, bool speaker) {
  ThreadChoice c = choose_threads(f.threads, ranks_sharing);
  if (speaker && !c.note.empty()) std::fprintf(stderr, "%s\n", c.note.c_str());
  f.threads = c.threads;
  set_num_threads(f.threads);
  set_compute_precision(parse_precision(f.precision));  // process-wide, as the threads
}

// Fills in what depends on the model: batch, lr, optimizer, weight decay.
template <class Flags>
void apply_model_defaults(Flags& f) {
  const bool mlp = f.model == "mlp", gpt = f.model == "gpt";
  if (f.batch <= 0) f.batch = gpt ? 16 : 256;
  if (f.lr < 0) f.lr = mlp ? 0.05 : gpt ? 1e-3 : 0.1;
  if (f.optimizer.empty()) f.optimizer = gpt ? "adamw" : "sgd";
  if (f.weight_decay < 0) f.weight_decay = f.optimizer == "adamw" ? 0.01 : 0.0;
}

struct TrainSetup {
  std::unique_ptr<nn::Dataset> train, test;  // test: mlp and dlrm
  // The model as parallelize takes it (model_spec.h), and as one process
  // trains it (build_setup only).
  std::shared_ptr<const parallel::ModelSpec> spec;
  std::unique_ptr<nn::Sequential> model;
  // The recipe: trainer options, step count (--steps, else --epochs, else
  // 2 epochs for mlp and 200 steps for gpt), schedule and optimizer.
  nn::TrainOptions opts;
  int64_t steps = 0;
  nn::LrSchedule sched;
  std::unique_ptr<nn::Optimizer> opt;
  std::unique_ptr<nn::Loss> loss;  // null: the trainer's softmax cross-entropy
};

// The GPT the flags describe.
template <class Flags>
nn::GptConfig gpt_config(const Flags& f) {
  nn::GptConfig c;
  c.layers = f.layers;
  c.dim = f.d_model;
  c.heads = f.heads;
  c.context = f.context;
  c.dropout = f.dropout;
  c.recompute = f.recompute;
  c.moe = moe_config(f.moe);
  return c;
}

// The training recipe from the flags: trainer options, step count (needs
// s.train), learning-rate schedule and optimizer.
template <class Flags>
void set_recipe(const Flags& f, TrainSetup& s) {
  s.opts.global_batch = f.batch;
  s.opts.accum = f.accum;
  s.opts.clip = f.clip;
  s.opts.seed = f.seed;
  s.opts.loss_scaling = f.precision == "fp16";
  nn::Sampler probe(s.train->size(), f.batch, f.seed);
  s.steps = f.steps;
  if (s.steps <= 0)
    s.steps = (f.epochs > 0 ? f.epochs : (f.model == "mlp" ? 2 : f.model == "dlrm" ? 1 : 0)) *
              probe.steps_per_epoch();
  if (s.steps <= 0) s.steps = 200;  // gpt default
  s.sched.base = float(f.lr);
  s.sched.warmup = f.warmup;
  s.sched.cosine = f.cosine;
  s.sched.total = s.steps;
  if (f.optimizer == "sgd")
    s.opt = std::make_unique<nn::Sgd>(float(f.momentum), float(f.weight_decay));
  else
    s.opt = std::make_unique<nn::AdamW>(0.9f, 0.999f, 1e-8f, float(f.weight_decay));
}

// The gpt training text (--data, else ByteText's default).
template <class Flags>
std::unique_ptr<nn::Dataset> gpt_text(const Flags& f) {
  std::string path = f.data.empty() ? nn::ByteText::default_path() : f.data;
  return std::make_unique<nn::ByteText>(path, f.context);
}

// The model the flags name, as parallelize takes it (model_spec.h).
template <class Flags>
std::shared_ptr<const parallel::ModelSpec> model_spec(const Flags& f) {
  if (f.model == "mlp") return parallel::mlp_spec({784, 512, 512, 10}, f.seed);
  if (f.model == "dlrm") return parallel::dlrm_spec(dlrm_model_config(f.dlrm), f.seed);
  return parallel::gpt_spec(gpt_config(f), f.seed);
}

// The data sets and the model's spec the flags name, the loss one
// process trains with (null: the trainer's softmax cross-entropy) and the
// training recipe: no model is built.
template <class Flags>
TrainSetup data_setup(const Flags& f) {
  TrainSetup s;
  if (f.model == "mlp") {
    std::string dir = f.data_dir.empty() ? nn::FashionMnist::default_dir() : f.data_dir;
    s.train = std::make_unique<nn::FashionMnist>("train", dir);
    s.test = std::make_unique<nn::FashionMnist>("test", dir);
  } else if (f.model == "dlrm") {
    DlrmSetup d = build_dlrm(f.dlrm);
    s.train = std::move(d.train);
    s.test = std::move(d.test);
    s.loss = std::move(d.loss);
  } else {
    s.train = gpt_text(f);
  }
  s.spec = model_spec(f);
  set_recipe(f, s);
  return s;
}

// data_setup and a freshly initialised model (seeded); then --init-from
// loads weights and --save-init writes them (when `write_init`).
template <class Flags>
TrainSetup build_setup(const Flags& f, bool write_init) {
  TrainSetup s = data_setup(f);
  s.model = s.spec->build_serial();
  auto params = s.model->parameters();
  if (!f.init_from.empty()) load_parameters(load_checkpoint(f.init_from), params);
  if (!f.save_init.empty() && write_init) {
    Checkpoint ck;
    add_parameters(ck, params);
    ck.meta["seed"] = std::to_string(f.seed);
    save_checkpoint(f.save_init, ck);
  }
  return s;
}

// Whether argv holds one of `flags`, as "--flag" or "--flag=value".
inline bool has_any_flag(int argc, char** argv, std::initializer_list<const char*> flags) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    for (const char* flag : flags)
      if (a == flag || a.rfind(std::string(flag) + "=", 0) == 0) return true;
  }
  return false;
}

// World size and this process's rank in the job a launcher (braid run,
// torchrun, mpirun, srun) started it in, by the library's rules (job.h): 1
// and 0 when none.
inline int job_world_from_env() { return launched_job().size; }
inline int job_rank_from_env() { return launched_job().rank; }

}  // namespace braid::tool
