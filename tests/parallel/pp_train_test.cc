// Pipeline-parallel training equals single-process training: an MLP and a
// small GPT, 10 steps at pp = 2 (GPipe, 1F1B, interleaved with 2 chunks per
// rank) and pp = 4 (GPipe, 1F1B), real processes, one job per world size:
// every step's loss and the final parameters of every stage match
// nn::Trainer on the same global batch within 1e-5 relative. Every stage
// keeps one activation slot per live micro-batch, so no forward runs twice
// (recomputed() == 0) and the slots in use peak at check_schedule's
// peak_live; with fewer slots (recomputation) the result is the same. The
// executor's slot accounting shows 1F1B holding at most min(p, M)/M of
// GPipe's activation bytes. Also: the executor refuses a schedule the
// checker rejects and copies unlike the model, the Chrome trace of a real
// step, and a stage killed mid-step is named by the others' errors. The
// grad-ready hook fires once per parameter of the model per step.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "braid/comm.h"
#include "braid/kernels.h"
#include "braid/models.h"
#include "braid/pipeline.h"
#include "braid/trainer.h"
#include "support/multiproc.h"

namespace braid::parallel {
namespace {

constexpr int kSteps = 10;
constexpr int64_t kBatch = 16;
constexpr uint64_t kSeed = 7;

// Four noisy classes in 12 features.
class Classes : public nn::Dataset {
 public:
  int64_t size() const override { return 320; }
  int64_t targets_per_sample() const override { return 1; }
  void gather(const int64_t* idx, int64_t n, Tensor& x, Tensor& y) const override {
    x.resize({n, 12}, DType::kF32);
    y.resize({n}, DType::kI32);
    for (int64_t r = 0; r < n; ++r) {
      const int64_t i = idx[r];
      for (int64_t j = 0; j < 12; ++j)
        x.f32()[r * 12 + j] = float((i * 131 + j * 71) % 97) / 97.0f - 0.5f + (j % 4 == i % 4 ? 1.0f : 0.0f);
      y.i32()[r] = int32_t(i % 4);
    }
  }
};

struct Job {
  std::unique_ptr<nn::Sequential> model;
  std::unique_ptr<nn::Dataset> data;
  std::unique_ptr<nn::Optimizer> opt;
  nn::LrSchedule lr;
  double clip = 0;
};

// "mlp": 7 top-level modules. "gpt": 4 blocks (7 modules) with dropout (its
// masks must not depend on the micro-batch split, the slot or on
// recomputation).
std::unique_ptr<nn::Sequential> make_model(const std::string& kind) {
  if (kind == "mlp") return nn::make_mlp({12, 32, 24, 16, 4}, kSeed);
  return nn::make_gpt(
      nn::GptConfig{.vocab = 256, .context = 8, .layers = 4, .dim = 16, .heads = 2, .dropout = 0.1f, .moe = {}},
      kSeed);
}

ModelFactory copies_of(const std::string& kind) {
  return [kind] { return make_model(kind); };
}

// "mlp": SGD with momentum. "gpt": AdamW with warm-up and clipping.
Job make_setup(const std::string& kind) {
  set_num_threads(1);
  Job s;
  s.model = make_model(kind);
  if (kind == "mlp") {
    s.data = std::make_unique<Classes>();
    s.opt = std::make_unique<nn::Sgd>(0.9f, 1e-4f);
    s.lr.base = 0.05f;
  } else {
    std::string text;
    for (int i = 0; i < 400; ++i) text += "pipeline stage " + std::to_string(i % 13) + ". ";
    s.data = std::make_unique<nn::ByteText>(std::vector<uint8_t>(text.begin(), text.end()), 8, "t");
    // eps 1e-6: see data_parallel_test.cc (a zero-gradient bias).
    s.opt = std::make_unique<nn::AdamW>(0.9f, 0.999f, 1e-6f, 0.01f);
    s.lr.base = 3e-3f;
    s.lr.warmup = 3;
    s.clip = 0.5;  // the norm is over all stages: an all-reduce across them
  }
  return s;
}

using Params = std::map<std::string, std::vector<float>>;
struct Trace {
  std::vector<double> losses, norms;
  Params params;
};

const Trace& reference(const std::string& kind) {
  static std::map<std::string, Trace> cache;
  auto it = cache.find(kind);
  if (it != cache.end()) return it->second;
  Job s = make_setup(kind);
  nn::TrainOptions o;
  o.global_batch = kBatch;
  o.seed = kSeed;
  o.clip = s.clip;
  nn::Trainer t(*s.model, *s.data, *s.opt, s.lr, o);
  Trace r;
  for (int i = 0; i < kSteps; ++i) {
    const nn::StepStats st = t.step();
    r.losses.push_back(st.loss);
    r.norms.push_back(st.grad_norm);
  }
  for (auto* p : t.parameters()) r.params[p->name].assign(p->data.f32(), p->data.f32() + p->size());
  return cache.emplace(kind, std::move(r)).first->second;
}

struct Case {
  std::string kind, schedule;
  int micro_batches, chunks;
  int slots = 0;  // PipelineOptions::activation_slots
};

std::string describe(const Case& c, int pp) {
  return c.kind + " " + c.schedule + " pp=" + std::to_string(pp) + " M=" +
         std::to_string(c.micro_batches) + (c.chunks > 1 ? " v=" + std::to_string(c.chunks) : "") +
         (c.slots > 0 ? " slots=" + std::to_string(c.slots) : "");
}

// Trains one case on this rank and compares it with the reference.
// Returns the executor's peak activation bytes of the last step.
int64_t run_case(std::shared_ptr<Communicator> comm, const Case& c, const Trace& ref,
                 const std::string& trace_path = "") {
  const int pp = comm->size();
  const std::string what = describe(c, pp);
  Job s = make_setup(c.kind);
  Schedule sched = make_schedule(c.schedule, pp, c.micro_batches, c.chunks);
  auto bounds = partition_layers(std::vector<double>(s.model->size(), 1.0), sched.stages());
  PipelineOptions opts;
  opts.activation_slots = c.slots;
  PipelineExecutor ex(comm, *s.model, copies_of(c.kind), bounds, sched, opts);
  // nn::Trainer's step loop with the schedule as its forward/backward.
  nn::TrainOptions o;
  o.global_batch = kBatch;
  o.seed = kSeed;
  o.clip = s.clip;
  PipelineTrainer t(ex, *s.model, *s.data, *s.opt, s.lr, o);
  // The grad-ready hook: once per parameter of this rank per step, always
  // with the model's parameter (never a slot copy's).
  std::map<const nn::Parameter*, int> ready;
  t.hooks().grad_ready = [&](nn::Parameter& p) { ++ready[&p]; };
  int clipped = 0;
  for (int step = 0; step < kSteps; ++step) {
    ready.clear();
    const nn::StepStats st = t.step();
    const double loss = st.loss;
    EXPECT_EQ(ready.size(), ex.parameters().size()) << what << " step " << step;
    for (const nn::Parameter* p : ex.parameters()) {
      EXPECT_EQ(ready[p], 1) << what << " step " << step << " " << p->name;
    }
    EXPECT_LE(std::abs(loss - ref.losses[size_t(step)]), 1e-5 * std::abs(ref.losses[size_t(step)]))
        << what << " step " << step << ": " << loss << " vs " << ref.losses[size_t(step)];
    // The norm over all stages, which clipping used.
    const double norm = ref.norms[size_t(step)];
    EXPECT_LE(std::abs(st.grad_norm - norm), 1e-5 * norm) << what << " step " << step;
    clipped += s.clip > 0 && norm > s.clip;
  }
  if (s.clip > 0) {
    EXPECT_GT(clipped, 0) << what << ": clipping never applied";
  }
  // One slot per live micro-batch: no forward runs twice. With one slot
  // per chunk, GPipe recomputes every micro-batch but the last of each
  // chunk.
  const int peak = ex.report().peak_live[size_t(comm->rank())];
  if (c.slots == 0) {
    EXPECT_EQ(ex.recomputed(), 0) << what;
    EXPECT_EQ(ex.peak_live(), peak) << what;
  } else {
    EXPECT_LE(ex.peak_live(), c.slots * c.chunks) << what;
    for (int n : ex.slots()) EXPECT_LE(n, c.slots) << what;
    if (c.schedule == "gpipe" && c.slots == 1) {
      EXPECT_EQ(ex.recomputed(), c.micro_batches - 1) << what;
    }
  }
  EXPECT_GT(ex.peak_activation_bytes(), 0) << what;
  EXPECT_GE(ex.peak_held_bytes(), ex.peak_activation_bytes()) << what;
  EXPECT_FALSE(ex.parameters().empty()) << what;
  for (auto* p : ex.parameters()) {
    const auto& want = ref.params.at(p->name);
    if (size_t(p->size()) != want.size()) {
      ADD_FAILURE() << what << " " << p->name << ": " << p->size() << " elements vs " << want.size();
      continue;
    }
    double scale = 1e-2, worst = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      scale = std::max(scale, double(std::abs(want[i])));
      worst = std::max(worst, double(std::abs(p->data.f32()[i] - want[i])));
    }
    EXPECT_LE(worst, 1e-5 * scale) << what << " rank " << comm->rank() << " " << p->name;
  }
  if (!trace_path.empty()) write_pipeline_trace(*comm, sched, ex.timings(), trace_path);
  return ex.peak_activation_bytes();
}

void equivalence(int pp, const std::vector<Case>& cases, const std::string& trace_path) {
  for (const Case& c : cases) reference(c.kind);  // before forking
  testing::expect_all_pass(pp, [&](int rank, int n, std::shared_ptr<Store> store) {
    auto comm = testing::make_comm(rank, n, store, 60);
    for (size_t i = 0; i < cases.size(); ++i)
      run_case(comm, cases[i], reference(cases[i].kind), i == 0 ? trace_path : "");
    // A schedule the checker rejects never runs: rank 1 loses a receive.
    Schedule broken = gpipe_schedule(n, 4);
    broken.actions[1].erase(broken.actions[1].begin());
    Job s = make_setup("mlp");
    try {
      PipelineExecutor ex(comm, *s.model, copies_of("mlp"),
                          partition_layers(std::vector<double>(7, 1.0), n), broken);
      ADD_FAILURE() << "the executor accepted a rejected schedule";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("schedule 'gpipe' rejected: rank 1, action 0 (F m0)"),
                std::string::npos)
          << e.what();
    }
    // GPipe keeps 4 micro-batches live: without copies of the model (and
    // without asking for recomputation) there is nowhere to keep them.
    try {
      PipelineExecutor ex(comm, *s.model, nullptr, partition_layers(std::vector<double>(7, 1.0), n),
                          gpipe_schedule(n, 4));
      ADD_FAILURE() << "the executor ran GPipe without copies of the model";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("keeps 4 micro-batches live on a chunk of rank " +
                                           std::to_string(rank)),
                std::string::npos)
          << e.what();
    }
    // A copy whose parameters are not the model's (every layer wider) is
    // refused by name.
    try {
      PipelineExecutor ex(
          comm, *s.model, [] { return nn::make_mlp({12, 33, 25, 17, 5}, kSeed); },
          partition_layers(std::vector<double>(7, 1.0), n), gpipe_schedule(n, 4));
      ADD_FAILURE() << "the executor accepted a copy unlike the model";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("copy of its modules has parameter"), std::string::npos)
          << e.what();
    }
  }, std::chrono::seconds(600));
}

void expect_trace(const std::string& path, const Schedule& s) {
  std::ifstream f(path);
  ASSERT_TRUE(f.good()) << path;
  const auto j = nlohmann::json::parse(f);
  size_t actions = 0, events = 0;
  for (const auto& l : s.actions) actions += l.size();
  for (const auto& e : j.at("traceEvents"))
    if (e.at("ph") == "X") {
      ++events;
      EXPECT_GE(e.at("ts").get<double>(), 0.0);
      EXPECT_GE(e.at("dur").get<double>(), 0.0);
    }
  EXPECT_EQ(events, actions);
}

TEST(PipelineTrain, MatchesSingleProcessAtPp2) {
  const std::string trace = testing::temp_dir("pp2") + "/trace.json";
  equivalence(2,
              {{"mlp", "gpipe", 4, 1},
               {"mlp", "1f1b", 4, 1},
               {"mlp", "1f1b", 8, 1},
               {"mlp", "interleaved", 4, 2},
               {"mlp", "interleaved", 8, 2},
               {"mlp", "gpipe", 4, 1, 1},
               {"mlp", "1f1b", 8, 1, 1},
               {"gpt", "gpipe", 4, 1},
               {"gpt", "1f1b", 4, 1},
               {"gpt", "interleaved", 4, 2},
               {"gpt", "interleaved", 8, 2},
               {"gpt", "gpipe", 4, 1, 1},
               {"gpt", "interleaved", 8, 2, 2}},
              trace);
  expect_trace(trace, gpipe_schedule(2, 4));
}

// The memory goal from the executor's own accounting (bytes held
// in activation slots): 1F1B's peak on every stage is at most min(p, M)/M
// of GPipe's, plus 10%.
TEST(PipelineTrain, OneFOneBHoldsAFractionOfGPipesActivations) {
  constexpr int kMicro = 8;
  reference("gpt");
  testing::expect_all_pass(2, [&](int rank, int n, std::shared_ptr<Store> store) {
    auto comm = testing::make_comm(rank, n, store, 60);
    const int64_t gpipe = run_case(comm, {"gpt", "gpipe", kMicro, 1}, reference("gpt"));
    const int64_t ofob = run_case(comm, {"gpt", "1f1b", kMicro, 1}, reference("gpt"));
    const double bound = double(std::min(n, kMicro)) / kMicro * 1.1;
    ASSERT_GT(gpipe, 0);
    EXPECT_LE(double(ofob) / double(gpipe), bound)
        << "rank " << rank << ": 1F1B holds " << ofob << " bytes of activations, GPipe " << gpipe;
  }, std::chrono::seconds(300));
}

TEST(PipelineTrain, MatchesSingleProcessAtPp4) {
  equivalence(4,
              {{"mlp", "gpipe", 4, 1},
               {"mlp", "1f1b", 8, 1},
               {"gpt", "gpipe", 8, 1},
               {"gpt", "1f1b", 4, 1}},
              "");
}

TEST(PipelineTrain, AKilledStageIsNamedByTheOthers) {
  auto res = testing::run_ranks(4, [](int rank, int n, std::shared_ptr<Store> store) {
    auto comm = testing::make_comm(rank, n, store, 30);
    Job s = make_setup("mlp");
    PipelineOptions opts;
    int step = 0;
    // Rank 1 dies in the middle of the second step, after its third action.
    opts.after_action = [&](int action) {
      if (rank == 1 && step == 1 && action == 2) ::kill(::getpid(), SIGKILL);
    };
    PipelineExecutor ex(comm, *s.model, copies_of("mlp"),
                        partition_layers(std::vector<double>(7, 1.0), n),
                        one_f_one_b_schedule(n, 8), opts);
    nn::TrainOptions o;
    o.global_batch = kBatch;
    o.seed = kSeed;
    PipelineTrainer t(ex, *s.model, *s.data, *s.opt, s.lr, o);
    try {
      for (; step < 3; ++step) t.step();
      ADD_FAILURE() << "rank " << rank << " finished three steps without rank 1";
    } catch (const Error& e) {
      EXPECT_EQ(step, 1) << e.what();
      EXPECT_NE(std::string(e.what()).find("rank 1 (pid "), std::string::npos) << e.what();
    }
  }, std::chrono::seconds(120));
  ASSERT_EQ(res.size(), 4u);
  EXPECT_EQ(res[1].signal, SIGKILL) << res[1].output;
  for (int r : {0, 2, 3}) EXPECT_EQ(res[size_t(r)].exit_code, 0) << "rank " << r << ": " << res[size_t(r)].output;
}

}  // namespace
}  // namespace braid::parallel
