// dp × tp × pp training of the GPT equals single-process training: a small
// GPT with dropout, 10 AdamW steps with warm-up and clipping, real
// processes (one job per world size, many cases inside). Every step's loss
// and the final parameters (shards gathered over tp, each stage its own)
// are within 1e-5 relative of nn::Trainer on the same global batches, at
// (dp, tp, pp) = (2,2,1) (also sequence parallel), (2,1,2), (1,2,2) (also
// interleaved, 2 chunks) and (2,2,2), with GPipe and 1F1B, and ZeRO-1 over
// dp; stages cut by count, by hand-made costs and by measured costs
// (measure_gpt_module_costs, the same on every rank; also sequence
// parallel). Each rank holds only its stage's shards (parameter and optimizer
// bytes from the model's counters). A checkpoint saved at (2,2,2) under
// ZeRO-1 resumes at (1,1,1), (1,2,1), (2,1,1) with ZeRO-1 and in
// nn::Trainer, the next 5 losses equal to the uninterrupted run's. Slot
// copies are not initialised from the serial model. Bad input is refused
// by name.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "braid/comm.h"
#include "braid/data.h"
#include "braid/hybrid.h"
#include "braid/kernels.h"
#include "braid/mesh.h"
#include "braid/models.h"
#include "braid/trainer.h"
#include "support/multiproc.h"

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

struct Trace {
  std::vector<double> losses;  // kSteps + kMoreSteps
  std::map<std::string, std::vector<float>> params;  // after kSteps
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
      if (i + 1 == kSteps)
        for (nn::Parameter* p : tr.parameters())
          r.params[p->name].assign(p->data.f32(), p->data.f32() + p->size());
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
  std::vector<double> costs = {};  // HybridOptions::module_costs
  bool balance = false;       // costs measured (--pp-balance)
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

// Trains `c` for kSteps on this rank and compares with the serial run;
// saves a checkpoint at the end when `save_to` is set.
void run_case(const std::shared_ptr<Communicator>& world, const Case& c,
              const std::string& save_to = "") {
  set_num_threads(1);
  const std::string what = describe(c);
  const Trace& ref = serial();
  Mesh mesh(world, c.dp, c.tp, c.pp);
  HybridOptions o;
  o.chunks = c.chunks;
  o.sequence_parallel = c.sp;
  o.zero = c.zero;
  o.module_costs = c.costs;
  if (c.balance) {
    o.module_costs = measure_gpt_module_costs(mesh, config(), kSeed,
                                              kBatch / (c.dp * c.micro_batches), c.sp);
    ASSERT_EQ(o.module_costs.size(), tp::gpt_module_count(config())) << what;
    // Every rank got world rank 0's numbers, so every rank cuts the same
    // stages; each module took some time.
    std::vector<double> lo = o.module_costs, hi = o.module_costs;
    world->all_reduce(lo.data(), lo.data(), lo.size(), DType::kF64, ReduceOp::kMin);
    world->all_reduce(hi.data(), hi.data(), hi.size(), DType::kF64, ReduceOp::kMax);
    EXPECT_EQ(lo, hi) << what;
    for (double t : o.module_costs) EXPECT_GT(t, 0.0) << what;
  }
  auto model = make_hybrid_gpt(mesh, config(), kSeed, c.schedule, c.micro_batches, o);
  if (!o.module_costs.empty()) {
    EXPECT_EQ(model->stage_bounds(), partition_layers(o.module_costs, c.pp * c.chunks)) << what;
  }
  nn::AdamW opt = optimizer();
  nn::ByteText data = text();
  HybridTrainer tr(*model, data, opt, schedule(), serial_options());
  for (int step = 0; step < kSteps; ++step) {
    const double loss = tr.step().loss;
    expect_loss(loss, ref.losses[size_t(step)], what + " step " + std::to_string(step));
    const HybridStepRecord& r = tr.last();
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
  int64_t checked = 0, serial_bytes_here = 0;
  for (const tp::Sharded& s : model->shards()) {
    Tensor full = tp::gather_shards(s.param->data, s.spec, s.full, *mesh.tp());
    const auto& want = ref.params.at(s.param->name);
    ASSERT_EQ(size_t(full.numel()), want.size()) << what << " " << s.param->name;
    expect_tensor(full.f32(), want, what + " " + s.param->name);
    ++checked;
    serial_bytes_here += int64_t(want.size()) * 4;
  }
  int64_t counts[2] = {checked, serial_bytes_here};
  mesh.pp()->all_reduce(counts, counts, 2, DType::kI64, ReduceOp::kSum);
  EXPECT_EQ(counts[0], int64_t(ref.params.size())) << what << ": stages miss parameters";
  EXPECT_EQ(counts[1], ref.bytes) << what;

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
  // AdamW keeps two slots per element it updates: under ZeRO-1, 1/dp of them.
  const int64_t state = model->optimizer_bytes(opt);
  if (c.zero == 1) {
    EXPECT_LE(state, 2 * bytes / c.dp + 2 * 4) << what;
  } else {
    EXPECT_EQ(state, 2 * bytes) << what;
  }
  if (!save_to.empty()) tr.save(save_to);
}

// Resumes the checkpoint of step kSteps at (dp, tp, 1) on this world and
// checks the next kMoreSteps losses against the uninterrupted serial run.
void resume(const std::shared_ptr<Communicator>& world, int dp, int tp, int zero,
            const std::string& path) {
  set_num_threads(1);
  const Trace& ref = serial();
  Mesh mesh(world, dp, tp, 1);
  HybridOptions o;
  o.zero = zero;
  auto model = make_hybrid_gpt(mesh, config(), kSeed, "1f1b", 2, o);
  nn::AdamW opt = optimizer();
  nn::ByteText data = text();
  HybridTrainer tr(*model, data, opt, schedule(), serial_options());
  tr.load(path);
  ASSERT_EQ(tr.next_step(), kSteps);
  EXPECT_EQ(opt.steps(), kSteps);
  for (int64_t step = kSteps; step < kSteps + kMoreSteps; ++step) {
    const double loss = tr.step().loss;
    expect_loss(loss, ref.losses[size_t(step)],
                "resumed at dp=" + std::to_string(dp) + " tp=" + std::to_string(tp) +
                    " zero=" + std::to_string(zero) + " step " + std::to_string(step));
  }
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
      HybridOptions o;
      o.module_costs = {4, 1, 1, 1, 1};
      EXPECT_EQ(make_hybrid_gpt(mesh, config(), kSeed, "1f1b", 2, o)->stage_bounds(),
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
    run_case(world, {2, 1, 2, "gpipe", 2, 1, false, 0, {4, 1, 1, 1, 1}});
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
    resume(testing::make_comm(rank, n, store, 60), 1, 1, 0, path);
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
    resume(world, 1, 2, 0, path);
    resume(world, 2, 1, 1, path);
  });
}

TEST(Hybrid, SlotCopiesDoNotBuildTheSerialModel) {
  testing::expect_all_pass(2, [&](int rank, int n, std::shared_ptr<Store> store) {
    auto world = testing::make_comm(rank, n, store, 60);
    Mesh mesh(world, 1, 1, 2);
    // GPipe keeps all 4 micro-batches live on each stage: 3 slot copies
    // of its modules per rank, yet only the model itself is initialised
    // from the serial GPT.
    const int64_t before = tp::TpGpt::serial_builds();
    auto model = make_hybrid_gpt(mesh, config(), kSeed, "gpipe", 4);
    EXPECT_EQ(tp::TpGpt::serial_builds() - before, 1);
    nn::AdamW opt = optimizer();
    nn::ByteText data = text();
    HybridTrainer tr(*model, data, opt, schedule(), serial_options());
    EXPECT_TRUE(std::isfinite(tr.step().loss));
  });
}

TEST(Hybrid, BadInputIsRefusedByName) {
  testing::expect_all_pass(2, [&](int rank, int n, std::shared_ptr<Store> store) {
    auto world = testing::make_comm(rank, n, store, 60);
    Mesh mesh(world, 2, 1, 1);
    auto refused = [&](auto&& call, const std::string& needle) {
      try {
        call();
        ADD_FAILURE() << "accepted; expected '" << needle << "'";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), Errc::kInvalidArgument) << e.what();
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      }
    };
    refused([&] { make_hybrid_gpt(mesh, config(), 1, "zigzag", 2); }, "zigzag");
    HybridOptions zero2;
    zero2.zero = 2;
    refused([&] { make_hybrid_gpt(mesh, config(), 1, "1f1b", 2, zero2); }, "ZeRO stage 2");
    HybridOptions costs;
    costs.module_costs = {1, 2};
    refused([&] { make_hybrid_gpt(mesh, config(), 1, "1f1b", 2, costs); },
            "2 module costs for the GPT's 5 top-level modules");
    auto model = make_hybrid_gpt(mesh, config(), 1, "1f1b", 2);
    nn::AdamW opt = optimizer();
    nn::ByteText data = text();
    nn::TrainOptions six = serial_options();
    six.global_batch = 6;
    refused([&] { HybridTrainer(*model, data, opt, schedule(), six); },
            "global batch 6 does not split into dp=2 copies of 1 accumulation rounds of 2 "
            "micro-batches");
    nn::TrainOptions accum = serial_options();
    accum.accum = 3;
    refused([&] { HybridTrainer(*model, data, opt, schedule(), accum); },
            "copies of 3 accumulation rounds");
    accum.accum = 0;
    refused([&] { HybridTrainer(*model, data, opt, schedule(), accum); }, "accum 0 (at least 1)");
    // The refusals came before any collective: the model still trains.
    HybridTrainer tr(*model, data, opt, schedule(), serial_options());
    EXPECT_TRUE(std::isfinite(tr.step().loss));
  });
}

}  // namespace
}  // namespace braid::parallel
