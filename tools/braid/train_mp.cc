// braid train gpt|mlp|dlrm --dp A --tp B --pp C — model-parallel training.
//
// train_cmd.cc hands over here when a model-parallel flag is given (--tp,
// --pp, --micro-batches, --schedule, --virtual-stages, --sequence-parallel,
// --print-schedule, --trace, --pp-balance, --ep, --moe-experts). The model is the flags' model
// spec (train_setup.h: model_spec) laid over an A × B × C Mesh by
// parallel::parallelize, and trained by parallel::ParallelTrainer: what a
// library user writes for any model and layout. Started plainly, A·B·C ranks are forked under
// launch::run_forked (as --dp does); under a launcher the job's size must be
// A·B·C.
//
// The step loop is nn::Trainer's (parallel::ParallelTrainer): each pipeline
// copy reads its shard of the global batch (--batch samples, drawn by the
// same Sampler as `braid train`), so every layout trains on the same
// samples and its losses equal the single-process run's within rounding.
// Rank 0 prints the mesh, shows the progress and writes the JSON log: step
// records carry every world rank's compute_s / exposed_comm_s / bubble_s
// (arrays indexed by world rank; bubble_s is the rank's waits in the
// schedule's communication actions), the done record the measured bubble
// fraction (see add_bubble), each stage's peak activation bytes and
// tokens/s. --accum, --init-from, --save-init and --recompute mean what
// they mean in one process: accumulation rounds of the whole schedule,
// weights from / to a checkpoint in the serial layout, and every block
// recomputing its activations in its backward.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "braid/checkpoint.h"
#include "braid/comm.h"
#include "braid/error.h"
#include "braid/mesh.h"
#include "braid/parallelize.h"
#include "braid/pipeline.h"
#include "braid/supervisor.h"
#include "subcommands.h"
#include "train_report.h"
#include "train_setup.h"

namespace braid::tool {

namespace {

// CLI::PositiveNumber's message names the range 0 to DBL_MAX; this one says
// what is wanted.
const CLI::Validator kAtLeastOne(
    [](std::string& v) -> std::string {
      try {
        size_t end = 0;
        if (std::stoll(v, &end) >= 1 && end == v.size()) return {};
      } catch (const std::exception&) {
      }
      return "must be a whole number of at least 1, not '" + v + "'";
    },
    "INT>=1");

struct MpFlags : TrainFlags {
  int dp = 1, tp = 1, pp = 1;
  int micro_batches = 0;  // 0: pp (at least 1)
  std::string schedule = "1f1b";
  int virtual_stages = 0;  // 0: 2 for interleaved, else 1
  bool sequence_parallel = false, print_schedule = false, pp_balance = false;
  std::string trace;
  int zero = 0;
  int ep = 1;  // expert parallelism (MoE GPT): ranks of dp that split the experts
  std::string transport;

  int world() const { return dp * tp * pp; }
  std::string layout() const {
    return "--dp " + std::to_string(dp) + " --tp " + std::to_string(tp) + " --pp " +
           std::to_string(pp);
  }
};

// --moe-* and --ep, before any rank starts: the MoE configuration, ep
// dividing --dp and the experts, ZeRO 0.
void check_moe_layout(const MpFlags& f) {
  auto reject = [](const std::string& why) { throw Error(Errc::kInvalidArgument, why); };
  if (f.moe.experts == 0) {
    if (f.ep != 1) reject("--ep " + std::to_string(f.ep) + " needs an MoE model (--moe-experts)");
    return;
  }
  if (f.model != "gpt") reject("--moe-experts applies to model gpt, not " + f.model);
  nn::check_moe(moe_config(f.moe));
  if (f.dp % f.ep != 0)
    reject("--ep " + std::to_string(f.ep) + " does not divide --dp " + std::to_string(f.dp) +
           " (expert-parallel groups are --ep of the --dp copies)");
  if (f.moe.experts % f.ep != 0)
    reject("--moe-experts " + std::to_string(f.moe.experts) + " not divisible by --ep " +
           std::to_string(f.ep));
  if (f.ep > 1 && f.zero != 0)
    reject("--ep " + std::to_string(f.ep) + " with --zero " + std::to_string(f.zero) +
           ": expert parallelism runs with ZeRO 0 only");
}

// Fills the defaults that depend on the layout and rejects what the
// model-parallel path does not do, naming the flag.
void settle(MpFlags& f) {
  auto reject = [](const std::string& why) { throw Error(Errc::kInvalidArgument, why); };
  if (f.virtual_stages == 0) f.virtual_stages = f.schedule == "interleaved" ? 2 : 1;
  if (f.schedule == "interleaved" && f.virtual_stages < 2)
    reject("--schedule interleaved needs --virtual-stages >= 2");
  if (f.schedule != "interleaved" && f.virtual_stages != 1)
    reject("--virtual-stages applies to --schedule interleaved only");
  if (f.micro_batches == 0) f.micro_batches = f.pp;
  if (f.pp_balance && f.pp * f.virtual_stages < 2)
    reject("--pp-balance needs more than one pipeline stage (--pp 2 or more)");
  const bool pipelined = f.tp > 1 || f.pp > 1;
  if (!f.trace.empty() && !pipelined)
    reject("--trace writes a pipeline's timeline, and --tp 1 --pp 1 runs none");
  if (f.zero > 1 && pipelined)
    reject("--zero " + std::to_string(f.zero) + " with " + f.layout() +
           ": beside --tp or --pp ZeRO 0 or 1 (stages 2 and 3 need --tp 1 --pp 1)");
  apply_model_defaults(f);
  // Each virtual stage holds at least one of the model's units; sizes split
  // over --tp (the spec's messages).
  const auto spec = model_spec(f);
  const size_t units = spec->unit_count();
  if (size_t(f.pp) * size_t(f.virtual_stages) > units)
    reject("--pp " + std::to_string(f.pp) +
           (f.virtual_stages > 1 ? " x --virtual-stages " + std::to_string(f.virtual_stages)
                                 : std::string()) +
           " makes " + std::to_string(f.pp * f.virtual_stages) +
           " pipeline stages, but model " + f.model + " has only " + std::to_string(units) +
           " units to cut between them: " + spec->describe_units());
  spec->check_split(f.tp, f.sequence_parallel);
  check_moe_layout(f);
  if (f.batch % (int64_t(f.dp) * f.accum * f.micro_batches) != 0)
    reject("--batch " + std::to_string(f.batch) + " does not split into --dp " +
           std::to_string(f.dp) + " copies of --accum " + std::to_string(f.accum) +
           " rounds of --micro-batches " + std::to_string(f.micro_batches));
}

// --print-schedule: the checked schedule's timeline, then which world ranks
// run each stage. Needs no ranks.
int print_schedule(const MpFlags& f) {
  parallel::Schedule s =
      parallel::make_schedule(f.schedule, f.pp, f.micro_batches, f.virtual_stages);
  parallel::ScheduleReport rep = parallel::check_schedule(s);
  std::printf("%s", parallel::format_timeline(s, rep).c_str());
  std::printf("mesh dp %d x pp %d x tp %d = %d ranks\n", f.dp, f.pp, f.tp, f.world());
  for (int p = 0; p < f.pp; ++p) {
    std::printf("pipeline rank %d: world ranks", p);
    for (int d = 0; d < f.dp; ++d)
      for (int t = 0; t < f.tp; ++t)
        std::printf(" %d", parallel::Mesh::rank_at({d, p, t}, f.tp, f.pp));
    std::printf("\n");
  }
  return 0;
}

// Per world rank, its last step's split, gathered on every rank: the
// record's, then the executor's span and waits over the step (the bubble)
// and whether its pipeline's ranks share this host's clock.
struct RankSplit {
  double compute_s, comm_s, bubble_s, step_s, peak_act;
  double span_start, span_end, pipe_comm_s, pipe_one_host;
};

// Accumulates one step's bubble over every pipeline copy (dp, tp) from the
// gathered splits: [idle, ranks × span] (parallel::pipeline_bubble) when
// each pipeline's ranks share one host's clock; else the record's waits
// in communication actions over the step time, which misses the time a
// rank sits before its first action and after its last.
void add_bubble(const std::vector<RankSplit>& split, const MpFlags& f, double acc[2],
                bool& spans) {
  spans = true;
  for (const RankSplit& q : split) spans = spans && q.pipe_one_host > 0;
  if (!spans) {
    for (const RankSplit& q : split) {
      acc[0] += q.bubble_s;
      acc[1] += q.step_s;
    }
    return;
  }
  for (int d = 0; d < f.dp; ++d)
    for (int t = 0; t < f.tp; ++t) {
      std::vector<parallel::ActionTiming> span;
      std::vector<double> comm;
      for (int p = 0; p < f.pp; ++p) {
        const RankSplit& q = split[size_t((d * f.pp + p) * f.tp + t)];  // mesh.h's layout
        span.push_back({q.span_start, q.span_end});
        comm.push_back(q.pipe_comm_s);
      }
      const auto [idle, total] = parallel::pipeline_bubble(span, comm);
      acc[0] += idle;
      acc[1] += total;
    }
}

int run_rank(std::shared_ptr<Communicator> comm, MpFlags f) {
  const int rank = comm->rank(), world = comm->size();
  const bool logger = rank == 0;
  apply_threads(f, comm->host_size(), logger);
  resume_after_restart(f, logger);

  parallel::Mesh mesh(comm, f.dp, f.tp, f.pp);
  if (logger && !f.quiet) std::fprintf(stderr, "%s\n", mesh.describe().c_str());

  TrainSetup setup = data_setup(f);
  const int64_t steps = setup.steps;
  parallel::ParallelOptions po;
  po.schedule = f.schedule;
  po.micro_batches = f.micro_batches;
  po.chunks = f.virtual_stages;
  po.sequence_parallel = f.sequence_parallel;
  po.dp.zero = f.zero;
  po.ep = f.ep;
  po.init_from = f.init_from;  // as build_setup in one process
  if (f.pp_balance)
    po.unit_costs = parallel::measure_unit_costs(
        mesh, setup.spec, f.batch / (int64_t(f.dp) * f.micro_batches), f.sequence_parallel);
  auto model = parallel::parallelize(setup.spec, mesh, po);
  if (f.pp_balance && logger) {
    std::printf("pp balance: the %s's units by measured time\n%s", f.model.c_str(),
                parallel::format_partition(po.unit_costs, model->stage_bounds()).c_str());
    std::fflush(stdout);
  }
  nn::Optimizer& opt = *setup.opt;
  // As build_setup in one process: the loaded weights are the ones saved.
  if (!f.save_init.empty()) model->save(f.save_init, opt, 0, f.seed);
  parallel::ParallelTrainer trainer(*model, *setup.train, opt, setup.sched, setup.opts);
  if (!f.resume.empty()) trainer.load(f.resume);
  const double pipe_one_host = mesh.pp()->host_size() == mesh.pp()->size() ? 1 : 0;

  std::ofstream jlog = open_json_log(f, logger);
  if (logger && !f.quiet)
    std::fprintf(stderr,
                 "braid train %s: %lld steps, global batch %lld, %s lr %g, dp %d x tp %d x "
                 "pp %d, %s schedule, %d micro-batches%s%s, %d thread%s per rank\n",
                 f.model.c_str(), (long long)steps, (long long)f.batch, f.optimizer.c_str(), f.lr, f.dp, f.tp,
                 f.pp, f.schedule.c_str(), f.micro_batches,
                 f.virtual_stages > 1
                     ? (", " + std::to_string(f.virtual_stages) + " virtual stages").c_str()
                     : "",
                 f.sequence_parallel ? ", sequence parallel" : "", f.threads,
                 f.threads > 1 ? "s" : "");

  const int64_t first = trainer.next_step();
  StepReporter report(f, first, steps, std::min<int64_t>(20, steps / 5), logger);
  double last_loss = 0;
  std::vector<RankSplit> split(static_cast<size_t>(world));
  double bubble_acc[2] = {0, 0};  // [idle, ranks × span] over the measured steps
  bool bubble_spans = true;
  std::vector<int64_t> stage_peak(size_t(f.pp), 0);
  for (int64_t s = first; s < steps; ++s) {
    const nn::StepStats st = trainer.step();
    const parallel::ParallelStepRecord& r = trainer.last();
    last_loss = st.loss;
    RankSplit mine{r.compute_s, r.comm_s, r.bubble_s, r.step_s, double(r.peak_activation_bytes),
                   0,           0,        0,          pipe_one_host};
    if (model->pipelined()) {
      const parallel::PipelineExecutor& ex = model->executor();
      mine.span_start = ex.step_span().start;
      mine.span_end = ex.step_span().end;
      mine.pipe_comm_s = ex.step_comm_s();
    }
    comm->all_gather(&mine, split.data(), sizeof(RankSplit) / sizeof(double), DType::kF64);
    for (int w = 0; w < world; ++w) {
      const RankSplit& q = split[size_t(w)];
      const int stage = (w / f.tp) % f.pp;  // mesh.h: world rank = (d·pp + p)·tp + t
      stage_peak[size_t(stage)] = std::max(stage_peak[size_t(stage)], int64_t(q.peak_act));
    }
    if (report.measured(s)) add_bubble(split, f, bubble_acc, bubble_spans);
    const nlohmann::json moe = moe_step_record(comm.get(), f.moe.experts, r.step_s, mesh.coord().tp == 0);
    report.after_step(s, st, r.comm_s / std::max(1e-12, r.step_s));
    if (logger && !moe.is_null() && !f.quiet && report.measured(s) && (s + 1) % 20 == 0)
      std::fprintf(stderr, "  moe: tokens/expert %s, dropped %lld, aux %.4f, imbalance %.2f, "
                           "all_to_all %.1f%% of step\n",
                   moe["tokens_per_expert"].dump().c_str(), (long long)moe["dropped"].get<int64_t>(),
                   moe["aux_loss"].get<double>(), moe["imbalance"].get<double>(),
                   100.0 * moe["a2a_fraction"].get<double>());
    if (jlog.is_open())
      log_step_per_rank(jlog, st, split,
                        {{"compute_s", &RankSplit::compute_s},
                         {"exposed_comm_s", &RankSplit::comm_s},
                         {"bubble_s", &RankSplit::bubble_s}},
                        moe);
    if (checkpoint_due(f, s)) trainer.save(f.checkpoint);
  }
  const double throughput = report.finish();
  if (!f.checkpoint.empty()) trainer.save(f.checkpoint);
  // The trace of the last step: the pipeline of dp copy 0, tp rank 0.
  if (!f.trace.empty() && model->pipelined() && mesh.coord().dp == 0 && mesh.coord().tp == 0)
    parallel::write_pipeline_trace(*mesh.pp(), model->schedule(), model->timings(), f.trace);

  const double bubble_frac = bubble_acc[1] > 0 ? bubble_acc[0] / bubble_acc[1] : 0;
  nlohmann::json done = done_record(f, steps, last_loss, report.seconds(), throughput);
  done.update({{"dp", f.dp},
               {"tp", f.tp},
               {"pp", f.pp},
               {"schedule", f.schedule},
               {"micro_batches", f.micro_batches},
               {"virtual_stages", f.virtual_stages},
               {"sequence_parallel", f.sequence_parallel},
               {"zero", f.zero},
               {"ep", f.ep},
               {"moe_experts", f.moe.experts},
               {"bubble_fraction", bubble_frac},
               // "span": idle share of the pipelines' spans, check_schedule's
               // bubble measured; "waits": communication waits over step time
               {"bubble_method", bubble_spans ? "span" : "waits"},
               // per stage; null without a pipeline (not measured there)
               {"peak_activation_bytes",
                model->pipelined() ? nlohmann::json(stage_peak) : nlohmann::json(nullptr)},
               // world rank 0's share: stage 0, tp rank 0
               {"rank0_param_bytes", model->parameter_bytes()},
               {"rank0_optim_bytes", model->optimizer_bytes(opt)},
               {"peak_rss_bytes", peak_rss_bytes()},
               // rank 0's tensor storage at its fullest (braid/tensor.h)
               {"peak_tensor_bytes", tensor_peak_bytes()},
               {"precision", f.precision}});
  if (logger) {
    if (jlog.is_open()) jlog << done.dump() << '\n';
    std::printf("done: %s %lld steps on dp %d x tp %d x pp %d, final loss %.4f, %s %s, "
                "bubble %.1f%%, %.1fs\n",
                f.model.c_str(), (long long)steps, f.dp, f.tp, f.pp, last_loss, human(throughput).c_str(),
                report.unit(), 100.0 * bubble_frac, report.seconds());
    std::fflush(stdout);
  }
  comm->barrier();
  return 0;
}

}  // namespace

bool mp_requested(int argc, char** argv) {
  return has_any_flag(argc, argv,
                      {"--tp", "--pp", "--micro-batches", "--schedule", "--virtual-stages",
                       "--sequence-parallel", "--print-schedule", "--trace", "--pp-balance",
                       "--ep", "--moe-experts"});
}

int train_mp_main(int argc, char** argv) {
  CLI::App app{"braid train: train a model over a dp x tp x pp mesh", "braid train"};
  MpFlags f;
  add_train_options(app, f, true);
  app.add_option("--dp", f.dp, "data-parallel copies of the pipeline (1)")
      ->check(kAtLeastOne);
  app.add_option("--tp", f.tp, "tensor-parallel ranks per stage (1)")->check(kAtLeastOne);
  app.add_option("--pp", f.pp, "pipeline stages (1)")->check(kAtLeastOne);
  app.add_option("--micro-batches", f.micro_batches,
                 "micro-batches per pipeline copy per step (default: --pp)")
      ->check(kAtLeastOne);
  app.add_option("--schedule", f.schedule, "pipeline schedule: gpipe, 1f1b or interleaved")
      ->check(CLI::IsMember({"gpipe", "1f1b", "interleaved"}));
  app.add_option("--virtual-stages", f.virtual_stages,
                 "interleaved: model chunks per pipeline rank (2)")
      ->check(kAtLeastOne);
  app.add_flag("--sequence-parallel", f.sequence_parallel,
               "shard the activations between tensor-parallel layers along the sequence");
  app.add_flag("--print-schedule", f.print_schedule,
               "print the checked schedule's timeline and exit without training");
  app.add_flag("--pp-balance", f.pp_balance,
               "cut the stages by each layer's measured forward+backward time, not by its "
               "estimated multiply-adds");
  app.add_option("--trace", f.trace, "write the last step's pipeline as a Chrome trace to FILE");
  app.add_option("--zero", f.zero,
                 "ZeRO stage over dp: 0 none, 1 optimizer state sharded (2 +gradients, 3 "
                 "+parameters: --tp 1 --pp 1 only)")
      ->check(CLI::Range(0, 3));
  app.add_option("--ep", f.ep,
                 "gpt with --moe-experts: expert-parallel ranks (a divisor of --dp) that split "
                 "each MoE layer's experts (1)")
      ->check(kAtLeastOne);
  app.add_option("--transport", f.transport, "auto, shm or tcp (forked ranks)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  settle(f);
  const int job = job_world_from_env();
  if (f.print_schedule) return job_rank_from_env() == 0 ? print_schedule(f) : 0;
  if (job > 1) {
    if (job != f.world())
      throw Error(Errc::kInvalidArgument, f.layout() + " needs " + std::to_string(f.world()) +
                                              " ranks but the launcher started " +
                                              std::to_string(job));
    return run_rank(Communicator::from_env(), f);
  }
  if (f.world() == 1) return run_rank(Communicator::from_env(), f);
  CommOptions co;
  co.transport = f.transport;
  return launch::run_forked("braid train", f.world(), [&](const launch::ForkedRank& r) {
    return run_rank(r.communicator(co), f);
  });
}

}  // namespace braid::tool
