// dp × tp × pp training of the GPT (parallelize over gpt_spec) equals
// single-process training: a small
// GPT with dropout, 10 AdamW steps with warm-up and clipping, real
// processes (one job per world size, many cases inside). Every step's loss
// and the final parameters (shards gathered over tp, each stage its own)
// are within 1e-5 relative of nn::Trainer on the same global batches, at
// (dp, tp, pp) = (2,2,1) (also sequence parallel), (2,1,2), (1,2,2) (also
// interleaved, 2 chunks) and (2,2,2), with GPipe and 1F1B, and ZeRO-1 over
// dp; stages cut by count, by hand-made costs and by measured costs
// (measure_unit_costs, the same on every rank; also sequence
// parallel); every cut is the best one for its costs (against every
// possible cut; hand-made costs: written out) and each rank holds exactly
// its stages' modules. Each rank holds only its stage's shards (parameter
// bytes from the model's counters; under ZeRO-1 the optimizer state of
// exactly its chunk of the bucket). A checkpoint saved at (2,2,2) under
// ZeRO-1 resumes at (1,1,1), (1,2,1), (2,1,1) with ZeRO-1, (1,1,2),
// (1,2,2) interleaved, (2,1,2) with ZeRO-1 and in nn::Trainer, the next 5
// losses and the final parameters equal to the uninterrupted run's. Slot
// copies are not initialised from the serial model. Bad input is refused
// by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "braid/comm.h"
#include "braid/data.h"
#include "braid/data_parallel.h"
#include "braid/kernels.h"
#include "braid/mesh.h"
#include "braid/models.h"
#include "braid/parallelize.h"
#include "braid/trainer.h"
#include "support/multiproc.h"
#include "support/refused.h"

namespace braid::parallel {
namespace {

constexpr int kSteps = 10, kMoreSteps = 5;
constexpr int64_t kBatch = 8;
constexpr uint64_t kSeed = 13;

nn::GptConfig config() {
  nn::GptConfig c;
  c.context = 8;
  c.layers = 2;  // 5 top-level modules: 4 virtual stages fit
  c.dim = 16;
  c.heads = 4;
  c.dropout = 0.1f;
  return c;
}

std::shared_ptr<const ModelSpec> spec(uint64_t seed = kSeed) { return gpt_spec(config(), seed); }

// parallelize with the schedule and its micro-batches.
std::unique_ptr<ParallelModel> gpt_model(const Mesh& mesh, uint64_t seed, const std::string& sched,
                                         int micro_batches, ParallelOptions o = {}) {
  o.schedule = sched;
  o.micro_batches = micro_batches;
  return parallelize(spec(seed), mesh, o);
}

nn::ByteText text() {
  std::string s;
  const char* words[] = {"stages ", "pass ", "activations ", "and ", "shards ", "meet ",
                         "in ", "the ", "mesh. ", "braid ", "trains ", "gpt "};
  for (int i = 0; i < 500; ++i) s += words[(i * 5 + i / 4) % 12];
  return nn::ByteText(std::vector<uint8_t>(s.begin(), s.end()), 8, "hybrid test text");
}

nn::LrSchedule schedule() {
  nn::LrSchedule s;
  s.base = 3e-3f;
  s.warmup = 3;
  return s;
}

constexpr double kClip = 0.5;

// eps 1e-6: see data_parallel_test (a bias with an exactly zero gradient).
nn::AdamW optimizer() { return nn::AdamW(0.9f, 0.999f, 1e-6f, 0.01f); }

using Params = std::map<std::string, std::vector<float>>;

struct Trace {
  std::vector<double> losses;  // kSteps + kMoreSteps
  Params params;      // after kSteps
  Params params_end;  // after kSteps + kMoreSteps
  int64_t bytes = 0;
};

// The serial run's options: the global batch, seed and clip every layout uses.
nn::TrainOptions serial_options() {
  nn::TrainOptions o;
  o.global_batch = kBatch;
  o.seed = kSeed;
  o.clip = kClip;
  return o;
}

const Trace& serial() {
  static Trace t = [] {
    set_num_threads(1);
    Trace r;
    auto model = nn::make_gpt(config(), kSeed);
    nn::ByteText data = text();
    nn::AdamW opt = optimizer();
    nn::Trainer tr(*model, data, opt, schedule(), serial_options());
    for (int i = 0; i < kSteps + kMoreSteps; ++i) {
      r.losses.push_back(tr.step().loss);
      if (i + 1 == kSteps || i + 1 == kSteps + kMoreSteps)
        for (nn::Parameter* p : tr.parameters())
          (i + 1 == kSteps ? r.params : r.params_end)[p->name].assign(p->data.f32(),
                                                                     p->data.f32() + p->size());
    }
    r.bytes = nn::count_parameters(model->parameters()) * 4;
    return r;
  }();
  return t;
}

struct Case {
  int dp, tp, pp;
  std::string schedule;
  int micro_batches;
  int chunks = 1;
  bool sp = false;
  int zero = 0;
  std::vector<double> costs = {};  // ParallelOptions::unit_costs
  bool balance = false;       // costs measured (--pp-balance)
  std::vector<size_t> bounds = {};  // the stage bounds these costs must give, written out
};

std::string describe(const Case& c) {
  return "(dp,tp,pp)=(" + std::to_string(c.dp) + "," + std::to_string(c.tp) + "," +
         std::to_string(c.pp) + ") " + c.schedule + " M=" + std::to_string(c.micro_batches) +
         (c.chunks > 1 ? " v=" + std::to_string(c.chunks) : "") + (c.sp ? " sp" : "") +
         (c.zero ? " zero1" : "") + (c.costs.empty() ? "" : " hand-made costs") +
         (c.balance ? " pp-balance" : "");
}

// Max difference within 1e-5 of the tensor's largest value.
void expect_tensor(const float* a, const std::vector<float>& b, const std::string& what) {
  double scale = 1e-2, worst = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    scale = std::max(scale, double(std::abs(b[i])));
    worst = std::max(worst, double(std::abs(a[i] - b[i])));
  }
  EXPECT_LE(worst, 1e-5 * scale) << what << " max diff " << worst;
}

void expect_loss(double got, double want, const std::string& what) {
  EXPECT_LE(std::abs(got - want), 1e-5 * std::abs(want)) << what << ": " << got << " vs " << want;
}

// The smallest largest stage cost over every cut of `cost` into `stages`
// contiguous non-empty ranges, by trying them all (5 modules: at most
// C(4, 3) = 4 cuts): what partition_layers' dynamic programme must reach.
double best_largest_stage(const std::vector<double>& cost, int stages) {
  const size_t n = cost.size();
  double best = std::numeric_limits<double>::infinity();
  // Bit i of `cuts` set: a stage begins at module i + 1.
  for (uint32_t cuts = 0; cuts < (1u << (n - 1)); ++cuts) {
    if (std::popcount(cuts) != stages - 1) continue;
    double largest = 0, sum = 0;
    for (size_t i = 0; i < n; ++i) {
      sum += cost[i];
      if (i + 1 == n || (cuts >> i & 1u)) {
        largest = std::max(largest, sum);
        sum = 0;
      }
    }
    best = std::min(best, largest);
  }
  return best;
}

// Index of the GPT's top-level module that owns parameter `name` (emb, the
// blocks h.0 .. h.L-1, ln_f, lm_head: make_gpt's order).
size_t module_of(const std::string& name) {
  const size_t L = size_t(config().layers);
  if (name.rfind("emb.", 0) == 0) return 0;
  if (name.rfind("h.", 0) == 0) return 1 + std::stoul(name.substr(2));
  if (name.rfind("ln_f.", 0) == 0) return L + 1;
  if (name.rfind("lm_head.", 0) == 0) return L + 2;
  ADD_FAILURE() << "parameter " << name << " belongs to no GPT module";
  return size_t(-1);
}

// `model`'s stage bounds cut `costs` into pp · chunks non-empty stages
// with the smallest largest stage (checked against every possible cut),
// equal `want` when it is given, and this rank holds exactly the modules
// of its stages.
void expect_stages(const ParallelModel& model, const std::vector<double>& costs, int stages,
                   const std::vector<size_t>& want, const std::string& what) {
  const std::vector<size_t>& b = model.stage_bounds();
  if (!want.empty()) {
    EXPECT_EQ(b, want) << what;
  }
  ASSERT_EQ(b.size(), size_t(stages) + 1) << what;
  ASSERT_EQ(costs.size(), spec()->unit_count()) << what;
  EXPECT_EQ(b.front(), 0u) << what;
  EXPECT_EQ(b.back(), costs.size()) << what;
  double largest = 0;
  for (size_t v = 0; v + 1 < b.size(); ++v) {
    ASSERT_LT(b[v], b[v + 1]) << what << ": stage " << v << " is empty";
    double sum = 0;
    for (size_t i = b[v]; i < b[v + 1]; ++i) sum += costs[i];
    largest = std::max(largest, sum);
  }
  EXPECT_LE(largest, best_largest_stage(costs, stages) * (1 + 1e-12)) << what << ": a better cut exists";
  std::set<size_t> held, want_held;
  for (const tp::Sharded& s : model.shards()) held.insert(module_of(s.param->name));
  const Schedule& sched = model.schedule();
  for (int c = 0; c < sched.chunks; ++c) {
    const size_t v = size_t(sched.stage_of(model.mesh().coord().pp, c));
    for (size_t i = b[v]; i < b[v + 1]; ++i) want_held.insert(i);
  }
  EXPECT_EQ(held, want_held) << what << ": this rank's modules are not its stages'";
}

// Each parameter this rank holds, gathered over tp, against `want`; the
// stages between them hold every parameter once. Returns the serial bytes
// of this rank's stage.
int64_t expect_params(const ParallelModel& model, const Params& want, const std::string& what) {
  const Mesh& mesh = model.mesh();
  int64_t checked = 0, serial_bytes_here = 0;
  for (const tp::Sharded& s : model.shards()) {
    Tensor full = tp::gather_shards(s.param->data, s.spec, s.full, *mesh.tp());
    const auto& w = want.at(s.param->name);
    EXPECT_EQ(size_t(full.numel()), w.size()) << what << " " << s.param->name;
    if (size_t(full.numel()) != w.size()) continue;
    expect_tensor(full.f32(), w, what + " " + s.param->name);
    ++checked;
    serial_bytes_here += int64_t(w.size()) * 4;
  }
  int64_t counts[2] = {checked, serial_bytes_here};
  mesh.pp()->all_reduce(counts, counts, 2, DType::kI64, ReduceOp::kSum);
  EXPECT_EQ(counts[0], int64_t(want.size())) << what << ": stages miss parameters";
  EXPECT_EQ(counts[1], serial().bytes) << what;
  return serial_bytes_here;
}

// Trains `c` for kSteps on this rank and compares with the serial run;
// saves a checkpoint at the end when `save_to` is set.
void run_case(const std::shared_ptr<Communicator>& world, const Case& c,
              const std::string& save_to = "") {
  set_num_threads(1);
  const std::string what = describe(c);
  const Trace& ref = serial();
  Mesh mesh(world, c.dp, c.tp, c.pp);
  ParallelOptions o;
  o.chunks = c.chunks;
  o.sequence_parallel = c.sp;
  o.dp.zero = c.zero;
  o.unit_costs = c.costs;
  if (c.balance) {
    o.unit_costs = measure_unit_costs(mesh, spec(), kBatch / (c.dp * c.micro_batches), c.sp);
    ASSERT_EQ(o.unit_costs.size(), spec()->unit_count()) << what;
    // Every rank got world rank 0's numbers, so every rank cuts the same
    // stages; each module took some time.
    std::vector<double> lo = o.unit_costs, hi = o.unit_costs;
    world->all_reduce(lo.data(), lo.data(), lo.size(), DType::kF64, ReduceOp::kMin);
    world->all_reduce(hi.data(), hi.data(), hi.size(), DType::kF64, ReduceOp::kMax);
    EXPECT_EQ(lo, hi) << what;
    for (double t : o.unit_costs) EXPECT_GT(t, 0.0) << what;
  }
  auto model = gpt_model(mesh, kSeed, c.schedule, c.micro_batches, o);
  // Cut by the costs given, measured, or else each module's estimated
  // multiply-adds.
  expect_stages(*model, o.unit_costs.empty() ? spec()->unit_costs() : o.unit_costs,
                c.pp * c.chunks, c.bounds, what);
  nn::AdamW opt = optimizer();
  nn::ByteText data = text();
  ParallelTrainer tr(*model, data, opt, schedule(), serial_options());
  for (int step = 0; step < kSteps; ++step) {
    const double loss = tr.step().loss;
    expect_loss(loss, ref.losses[size_t(step)], what + " step " + std::to_string(step));
    const ParallelStepRecord& r = tr.last();
    EXPECT_EQ(r.step, step) << what;
    EXPECT_EQ(r.loss, loss) << what;
    EXPECT_GT(r.compute_s, 0.0) << what;
    EXPECT_GE(r.comm_s, 0.0) << what;
    EXPECT_GE(r.bubble_s, 0.0) << what;
    // Disjoint parts of one interval on one clock.
    EXPECT_LE(r.compute_s + r.comm_s + r.bubble_s, r.step_s + 1e-9) << what;
    EXPECT_GT(r.peak_activation_bytes, 0) << what;
    if (c.pp == 1) {
      EXPECT_EQ(r.bubble_s, 0.0) << what << ": no pipeline transfers";
    }
  }
  EXPECT_GT(tr.last().grad_norm, 0.0) << what;

  // Final parameters: each stage gathers its shards over tp; between them
  // the stages hold every serial parameter once.
  const int64_t serial_bytes_here = expect_params(*model, ref.params, what);

  // Memory: this rank holds its stage's share, split over tp (only the
  // replicated norms, biases and position table are whole on every rank).
  const int64_t bytes = model->parameter_bytes();
  EXPECT_LE(double(bytes), (double(serial_bytes_here) / c.tp) * 1.05 + 1) << what;
  if (c.tp == 1) {
    EXPECT_EQ(bytes, serial_bytes_here) << what;
  }
  if (c.pp > 1) {
    EXPECT_LT(serial_bytes_here, ref.bytes) << what << ": a stage holds everything";
  }
  if (c.pp == 1) {
    EXPECT_EQ(serial_bytes_here, ref.bytes) << what;
    EXPECT_LE(double(bytes), ref.bytes / double(c.tp) * 1.05) << what;
  }
  // AdamW keeps two f32 slots per element it updates. Under ZeRO-1 that is
  // this rank's chunk of each bucket: the model (under 1 MiB) fills one
  // bucket, padded to a multiple of dp, and dp rank d updates elements
  // [d·⌈n/dp⌉, (d+1)·⌈n/dp⌉) of its n; over dp the chunks hold every
  // element once.
  const int64_t state = model->optimizer_bytes(opt);
  if (c.zero == 1) {
    const int64_t n = bytes / 4, chunk = (n + c.dp - 1) / c.dp;
    ASSERT_LT(bytes, int64_t(DpOptions{}.first_bucket_bytes)) << what << ": not one bucket";
    const int64_t mine = std::clamp<int64_t>(n - mesh.coord().dp * chunk, 0, chunk);
    EXPECT_GT(mine, 0) << what;
    EXPECT_EQ(state, 2 * 4 * mine) << what << ": dp rank " << mesh.coord().dp << " of " << c.dp
                                   << ", " << n << " elements";
    int64_t over_dp = state;
    mesh.dp()->all_reduce(&over_dp, &over_dp, 1, DType::kI64, ReduceOp::kSum);
    EXPECT_EQ(over_dp, 2 * bytes) << what << ": the dp ranks' chunks do not cover the model once";
  } else {
    EXPECT_EQ(state, 2 * bytes) << what;
  }
  if (!save_to.empty()) tr.save(save_to);
}

// A layout to resume in: (dp, tp, pp), the schedule and its micro-batches
// (interleaved: 2 chunks), the ZeRO stage.
struct Resume {
  int dp, tp, pp;
  std::string schedule = "1f1b";
  int micro_batches = 2;
  int zero = 0;
};

// Resumes the checkpoint of step kSteps in layout `l` on this world: the
// next kMoreSteps losses and then the parameters equal the uninterrupted
// serial run's.
void resume(const std::shared_ptr<Communicator>& world, const Resume& l, const std::string& path) {
  set_num_threads(1);
  const Trace& ref = serial();
  const std::string what = "resumed at (dp,tp,pp)=(" + std::to_string(l.dp) + "," +
                           std::to_string(l.tp) + "," + std::to_string(l.pp) + ") " + l.schedule +
                           " zero=" + std::to_string(l.zero);
  Mesh mesh(world, l.dp, l.tp, l.pp);
  ParallelOptions o;
  o.dp.zero = l.zero;
  auto model = gpt_model(mesh, kSeed, l.schedule, l.micro_batches, o);
  nn::AdamW opt = optimizer();
  nn::ByteText data = text();
  ParallelTrainer tr(*model, data, opt, schedule(), serial_options());
  tr.load(path);
  ASSERT_EQ(tr.next_step(), kSteps) << what;
  EXPECT_EQ(opt.steps(), kSteps) << what;
  for (int64_t step = kSteps; step < kSteps + kMoreSteps; ++step) {
    const double loss = tr.step().loss;
    expect_loss(loss, ref.losses[size_t(step)], what + " step " + std::to_string(step));
  }
  expect_params(*model, ref.params_end, what);
}

TEST(Hybrid, MatchesSingleProcessOnFourRanks) {
  serial();
  testing::expect_all_pass(4, [&](int rank, int n, std::shared_ptr<Store> store) {
    auto world = testing::make_comm(rank, n, store, 120);
    run_case(world, {2, 2, 1, "1f1b", 2});
    run_case(world, {2, 2, 1, "gpipe", 2, 1, true});
    // Hand-made costs cut stage 0 down to the embedding alone.
    {
      Mesh mesh(world, 2, 1, 2);
      ParallelOptions o;
      o.unit_costs = {4, 1, 1, 1, 1};
      EXPECT_EQ(gpt_model(mesh, kSeed, "1f1b", 2, o)->stage_bounds(),
                (std::vector<size_t>{0, 1, 5}));
    }
    run_case(world, {2, 1, 2, "gpipe", 2});
    run_case(world, {2, 1, 2, "1f1b", 4});
    run_case(world, {1, 2, 2, "gpipe", 4});
    run_case(world, {1, 2, 2, "1f1b", 4});
    run_case(world, {1, 2, 2, "interleaved", 4, 2});
    run_case(world, {2, 2, 1, "1f1b", 2, 1, false, 1});
    run_case(world, {2, 1, 2, "1f1b", 2, 1, false, 1});
    // Stages cut by cost, not count: the split changes no number.
    run_case(world, {2, 1, 2, "gpipe", 2, 1, false, 0, {4, 1, 1, 1, 1}, false, {0, 1, 5}});
    run_case(world, {1, 2, 2, "1f1b", 4, 1, false, 0, {}, true});
    run_case(world, {1, 2, 2, "1f1b", 4, 1, true, 0, {}, true});
  }, std::chrono::seconds(600));
}

TEST(Hybrid, MatchesSingleProcessOnEightRanksAndCheckpointsResumeAnywhere) {
  serial();
  const std::string path = testing::temp_dir("hybrid") + "/step10.ck";
  testing::expect_all_pass(8, [&](int rank, int n, std::shared_ptr<Store> store) {
    auto world = testing::make_comm(rank, n, store, 240);
    run_case(world, {2, 2, 2, "gpipe", 2});
    run_case(world, {2, 2, 2, "1f1b", 2, 1, false, 1}, path);
  }, std::chrono::seconds(600));
  testing::expect_all_pass(1, [&](int rank, int n, std::shared_ptr<Store> store) {
    resume(testing::make_comm(rank, n, store, 60), {1, 1, 1}, path);
  });
  {
    // The file is nn::Trainer's format: the serial trainer resumes it too.
    const Trace& ref = serial();
    auto model = nn::make_gpt(config(), kSeed);
    nn::ByteText data = text();
    nn::AdamW opt = optimizer();
    nn::Trainer tr(*model, data, opt, schedule(), serial_options());
    tr.load(path);
    ASSERT_EQ(tr.next_step(), kSteps);
    for (int64_t step = kSteps; step < kSteps + kMoreSteps; ++step)
      expect_loss(tr.step().loss, ref.losses[size_t(step)],
                  "nn::Trainer resumed, step " + std::to_string(step));
  }
  testing::expect_all_pass(2, [&](int rank, int n, std::shared_ptr<Store> store) {
    auto world = testing::make_comm(rank, n, store, 60);
    resume(world, {1, 2, 1}, path);
    resume(world, {2, 1, 1, "1f1b", 2, 1}, path);
    resume(world, {1, 1, 2, "gpipe", 4}, path);
  });
  // Other pipelines than the one that saved: stages cut elsewhere
  // (interleaved: 4 virtual stages), split over tp, ZeRO-1 over dp.
  testing::expect_all_pass(4, [&](int rank, int n, std::shared_ptr<Store> store) {
    auto world = testing::make_comm(rank, n, store, 120);
    resume(world, {1, 2, 2, "interleaved", 4}, path);
    resume(world, {2, 1, 2, "1f1b", 2, 1}, path);
  });
}

TEST(Hybrid, SlotCopiesDoNotBuildTheSerialModel) {
  testing::expect_all_pass(2, [&](int rank, int n, std::shared_ptr<Store> store) {
    auto world = testing::make_comm(rank, n, store, 60);
    Mesh mesh(world, 1, 1, 2);
    // GPipe keeps all 4 micro-batches live on each stage: 3 slot copies
    // of its modules per rank, yet only the model itself is initialised
    // from the serial GPT.
    const int64_t before = ShardedModel::serial_builds();
    auto model = gpt_model(mesh, kSeed, "gpipe", 4);
    EXPECT_EQ(ShardedModel::serial_builds() - before, 1);
    nn::AdamW opt = optimizer();
    nn::ByteText data = text();
    ParallelTrainer tr(*model, data, opt, schedule(), serial_options());
    EXPECT_TRUE(std::isfinite(tr.step().loss));
  });
}

TEST(Hybrid, BadInputIsRefusedByName) {
  testing::expect_all_pass(2, [&](int rank, int n, std::shared_ptr<Store> store) {
    auto world = testing::make_comm(rank, n, store, 60);
    Mesh mesh(world, 2, 1, 1);
    testing::expect_refused([&] { gpt_model(mesh, 1, "zigzag", 2); }, "zigzag");
    ParallelOptions zero4;
    zero4.dp.zero = 4;
    testing::expect_refused([&] { gpt_model(mesh, 1, "1f1b", 2, zero4); }, "ZeRO stage 4 (0 to 3)");
    ParallelOptions costs;
    costs.unit_costs = {1, 2};
    testing::expect_refused([&] { gpt_model(mesh, 1, "1f1b", 2, costs); },
            "2 unit costs for the model's 5 units");
    auto model = gpt_model(mesh, 1, "1f1b", 2);
    nn::AdamW opt = optimizer();
    nn::ByteText data = text();
    nn::TrainOptions six = serial_options();
    six.global_batch = 6;
    testing::expect_refused([&] { ParallelTrainer(*model, data, opt, schedule(), six); },
            "global batch 6 does not split into dp=2 copies of 1 accumulation rounds of 2 "
            "micro-batches");
    nn::TrainOptions accum = serial_options();
    accum.accum = 3;
    testing::expect_refused([&] { ParallelTrainer(*model, data, opt, schedule(), accum); },
            "copies of 3 accumulation rounds");
    accum.accum = 0;
    testing::expect_refused([&] { ParallelTrainer(*model, data, opt, schedule(), accum); }, "accum 0 (at least 1)");
    // The refusals came before any collective: the model still trains.
    ParallelTrainer tr(*model, data, opt, schedule(), serial_options());
    EXPECT_TRUE(std::isfinite(tr.step().loss));
  });
}

}  // namespace
}  // namespace braid::parallel
