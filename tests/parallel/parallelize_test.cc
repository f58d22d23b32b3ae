// parallelize is not per model: the MLP and the DLRM go through the same
// parallelize and ParallelTrainer as the GPT (hybrid_test, tp_gpt_test),
// with real processes. Every step's loss and the final parameters (shards
// gathered over tp, each stage its own) are within 1e-5 relative of
// nn::Trainer on the spec's serial model with the same global batches:
//   * a 4-layer MLP (fc1 column, fc2 row, fc3 column, fc4 row under tp) at
//     (dp, tp, pp) = (1,2,1), (2,2,1) with ZeRO-1, (1,4,1), (1,1,4) 1F1B,
//     (2,1,2) GPipe and (1,2,2) 1F1B, and at (4,1,1) (no pipeline:
//     nn::Trainer's loop) with ZeRO 0, 2 (two micro-batches) and 3, whose
//     checkpoint resumes at (1,2,2); a 3-layer MLP, whose unpaired last layer is
//     replicated over tp, at (1,2,1) and (2,2,1);
//   * the DLRM at dp = 2 and 4 (binary cross-entropy, the spec's loss);
// a checkpoint saved by the MLP at (1,2,2) resumes in nn::Trainer with the
// uninterrupted run's losses; the MLP's tp shards are the column and row
// splits the spec names; what a spec cannot split is refused by name.
#include "braid/parallelize.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "braid/comm.h"
#include "braid/data.h"
#include "braid/dlrm.h"
#include "braid/kernels.h"
#include "braid/loss.h"
#include "braid/mesh.h"
#include "braid/models.h"
#include "braid/trainer.h"
#include "support/blobs.h"
#include "support/multiproc.h"
#include "support/refused.h"

namespace braid::parallel {
namespace {

constexpr int kSteps = 8, kMoreSteps = 4;
constexpr int64_t kBatch = 16;
constexpr uint64_t kSeed = 21;

using testing::Blobs;

const std::vector<int64_t> kMlp4 = {12, 16, 16, 16, 4}, kMlp3 = {12, 16, 16, 4};

nn::ClickConfig clicks() {
  nn::ClickConfig c;
  c.samples = 2048;
  c.test_samples = 256;
  c.features = 3;
  c.rows = 50;
  c.dense = 4;
  c.seed = 3;
  return c;
}

nn::DlrmConfig dlrm_config() { return nn::dlrm_config_for(clicks(), 8); }

nn::TrainOptions options() {
  nn::TrainOptions o;
  o.global_batch = kBatch;
  o.seed = 5;
  o.clip = 0.5;
  return o;
}

nn::LrSchedule schedule() {
  nn::LrSchedule s;
  s.base = 0.05f;
  s.warmup = 2;
  return s;
}

nn::Sgd optimizer() { return nn::Sgd(0.9f, 0.0f); }

using Params = std::map<std::string, std::vector<float>>;
struct Trace {
  std::vector<double> losses;  // kSteps + kMoreSteps
  Params params;               // after kSteps
  Params params_end;           // after kSteps + kMoreSteps
};

Params snapshot(nn::Module& m) {
  Params p;
  for (nn::Parameter* q : m.parameters())
    p[q->name] = std::vector<float>(q->data.f32(), q->data.f32() + q->size());
  return p;
}

// The spec's model trained in one process (nn::Trainer, the spec's loss).
Trace serial(const ModelSpec& spec, nn::Dataset& data) {
  set_num_threads(1);
  Trace t;
  auto model = spec.build_serial();
  nn::Sgd opt = optimizer();
  nn::Trainer tr(*model, data, opt, schedule(), options());
  auto loss = spec.make_loss(nullptr);
  // The GPT's loss needs a group; the MLP's and the DLRM's take none.
  tr.set_loss(*loss);
  for (int s = 0; s < kSteps + kMoreSteps; ++s) {
    t.losses.push_back(tr.step().loss);
    if (s + 1 == kSteps) t.params = snapshot(*model);
  }
  t.params_end = snapshot(*model);
  return t;
}

void expect_close(double got, double want, const std::string& what) {
  EXPECT_LE(std::abs(got - want), 1e-5 * std::max(std::abs(want), 1e-3))
      << what << ": " << got << " vs " << want;
}

// Every parameter this rank holds, gathered over tp, against `want`; over
// the pipeline's stages every parameter is checked once.
void expect_params(const ParallelModel& model, const Params& want, const std::string& what) {
  const Mesh& mesh = model.mesh();
  model.data_parallel().gather_all_params();  // ZeRO-3 keeps a shard between steps
  int64_t checked = 0;
  for (const tp::Sharded& s : model.shards()) {
    Tensor full = tp::gather_shards(s.param->data, s.spec, s.full, *mesh.tp());
    const std::vector<float>& w = want.at(s.param->name);
    ASSERT_EQ(size_t(full.numel()), w.size()) << what << " " << s.param->name;
    double scale = 0, worst = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      scale = std::max(scale, double(std::abs(w[i])));
      worst = std::max(worst, double(std::abs(full.f32()[i] - w[i])));
    }
    EXPECT_LE(worst, 1e-5 * std::max(scale, 1e-2)) << what << " " << s.param->name;
    ++checked;
  }
  mesh.pp()->all_reduce(&checked, &checked, 1, DType::kI64, ReduceOp::kSum);
  EXPECT_EQ(checked, int64_t(want.size())) << what << ": the stages miss parameters";
}

struct Layout {
  int dp, tp, pp;
  std::string schedule = "1f1b";
  int micro_batches = 1;
  int zero = 0;
};

std::string describe(const std::string& model, const Layout& l) {
  return model + " at (dp,tp,pp)=(" + std::to_string(l.dp) + "," + std::to_string(l.tp) + "," +
         std::to_string(l.pp) + ") " + l.schedule + " x" + std::to_string(l.micro_batches) +
         " zero=" + std::to_string(l.zero);
}

std::unique_ptr<ParallelModel> build(std::shared_ptr<const ModelSpec> spec, const Mesh& mesh,
                                     const Layout& l) {
  ParallelOptions o;
  o.schedule = l.schedule;
  o.micro_batches = l.micro_batches;
  o.dp.zero = l.zero;
  return parallelize(std::move(spec), mesh, o);
}

// kSteps of `spec` in layout `l` against the serial trace; saves a
// checkpoint at the end when `save_to` is set.
void run_case(const std::shared_ptr<Communicator>& world, std::shared_ptr<const ModelSpec> spec,
              nn::Dataset& data, const Trace& ref, const Layout& l,
              const std::string& save_to = "") {
  set_num_threads(1);
  const std::string what = describe(spec->name(), l);
  Mesh mesh(world, l.dp, l.tp, l.pp);
  auto model = build(spec, mesh, l);
  nn::Sgd opt = optimizer();
  ParallelTrainer tr(*model, data, opt, schedule(), options());
  for (int s = 0; s < kSteps; ++s)
    expect_close(tr.step().loss, ref.losses[size_t(s)], what + " step " + std::to_string(s));
  expect_params(*model, ref.params, what);
  if (!save_to.empty()) tr.save(save_to);
}

// Resumes the checkpoint of step kSteps in layout `l`: the next kMoreSteps
// losses and then the parameters equal the uninterrupted serial run's.
void resume(const std::shared_ptr<Communicator>& world, std::shared_ptr<const ModelSpec> spec,
            nn::Dataset& data, const Trace& ref, const Layout& l, const std::string& path) {
  set_num_threads(1);
  const std::string what = "resumed " + describe(spec->name(), l);
  Mesh mesh(world, l.dp, l.tp, l.pp);
  auto model = build(spec, mesh, l);
  nn::Sgd opt = optimizer();
  ParallelTrainer tr(*model, data, opt, schedule(), options());
  tr.load(path);
  ASSERT_EQ(tr.next_step(), kSteps) << what;
  for (int s = kSteps; s < kSteps + kMoreSteps; ++s)
    expect_close(tr.step().loss, ref.losses[size_t(s)], what + " step " + std::to_string(s));
  expect_params(*model, ref.params_end, what);
}

TEST(Parallelize, TheMlpTrainsAsOneProcessInEveryLayout) {
  Blobs data;
  std::shared_ptr<const ModelSpec> mlp4 = mlp_spec(kMlp4, kSeed), mlp3 = mlp_spec(kMlp3, kSeed);
  const Trace ref4 = serial(*mlp4, data), ref3 = serial(*mlp3, data);
  const std::string path = testing::temp_dir("parallelize") + "/mlp.ck";
  const std::string zero3_path = testing::temp_dir("parallelize") + "/mlp_zero3.ck";
  testing::expect_all_pass(
      2,
      [&](int rank, int n, std::shared_ptr<Store> store) {
        auto world = testing::make_comm(rank, n, store, 120);
        run_case(world, mlp4, data, ref4, {1, 2, 1});
        run_case(world, mlp3, data, ref3, {1, 2, 1});
        // The tp shards: fc1 and fc3 split by output feature (rows of the
        // weight), fc2 and fc4 by input feature (columns), every bias of a
        // row-parallel layer whole; the 3-layer MLP's fc3 whole.
        Mesh mesh(world, 1, 2, 1);
        auto model = build(mlp4, mesh, {1, 2, 1});
        std::map<std::string, int> dim;
        for (const tp::Sharded& s : model->shards()) dim[s.param->name] = s.spec.dim;
        EXPECT_EQ(dim, (std::map<std::string, int>{{"fc1.weight", 0},
                                                   {"fc1.bias", 0},
                                                   {"fc2.weight", 1},
                                                   {"fc2.bias", -1},
                                                   {"fc3.weight", 0},
                                                   {"fc3.bias", 0},
                                                   {"fc4.weight", 1},
                                                   {"fc4.bias", -1}}));
        auto three = build(mlp3, mesh, {1, 2, 1});
        for (const tp::Sharded& s : three->shards()) {
          if (s.param->name.rfind("fc3.", 0) == 0) {
            EXPECT_EQ(s.spec.dim, -1) << s.param->name;
          }
        }
      },
      std::chrono::seconds(120));
  testing::expect_all_pass(
      4,
      [&](int rank, int n, std::shared_ptr<Store> store) {
        auto world = testing::make_comm(rank, n, store, 120);
        run_case(world, mlp4, data, ref4, {2, 2, 1, "1f1b", 1, 1});
        run_case(world, mlp4, data, ref4, {1, 4, 1});
        run_case(world, mlp4, data, ref4, {1, 1, 4, "1f1b", 4});
        run_case(world, mlp4, data, ref4, {2, 1, 2, "gpipe", 2});
        run_case(world, mlp4, data, ref4, {1, 2, 2, "1f1b", 2}, path);
        run_case(world, mlp3, data, ref3, {2, 2, 1});
        // tp = pp = 1: nn::Trainer's loop under DataParallel, every ZeRO
        // stage (micro-batches as accumulation rounds); ZeRO-3's checkpoint
        // resumes in a pipeline split over tp.
        run_case(world, mlp4, data, ref4, {4, 1, 1});
        run_case(world, mlp4, data, ref4, {4, 1, 1, "1f1b", 2, 2});
        run_case(world, mlp4, data, ref4, {4, 1, 1, "1f1b", 1, 3}, zero3_path);
        resume(world, mlp4, data, ref4, {1, 2, 2, "1f1b", 2}, zero3_path);
      },
      std::chrono::seconds(300));
  // The checkpoint is nn::Trainer's format: one process resumes it.
  auto model = mlp4->build_serial();
  nn::Sgd opt = optimizer();
  nn::Trainer tr(*model, data, opt, schedule(), options());
  tr.load(path);
  ASSERT_EQ(tr.next_step(), kSteps);
  for (int s = kSteps; s < kSteps + kMoreSteps; ++s)
    expect_close(tr.step().loss, ref4.losses[size_t(s)], "resumed step " + std::to_string(s));
  const Params end = snapshot(*model);
  for (const auto& [name, w] : ref4.params_end)
    for (size_t i = 0; i < w.size(); ++i)
      ASSERT_NEAR(end.at(name)[i], w[i], 1e-5 * std::max(1.0f, std::abs(w[i]))) << name;
}

TEST(Parallelize, TheDlrmTrainsAsOneProcessDataParallel) {
  nn::ClickData data(clicks(), "train");
  std::shared_ptr<const ModelSpec> dlrm = dlrm_spec(dlrm_config(), kSeed);
  const Trace ref = serial(*dlrm, data);
  testing::expect_all_pass(
      4,
      [&](int rank, int n, std::shared_ptr<Store> store) {
        auto world = testing::make_comm(rank, n, store, 120);
        run_case(world, dlrm, data, ref, {4, 1, 1});
        run_case(world, dlrm, data, ref, {4, 1, 1, "1f1b", 2, 1});
      },
      std::chrono::seconds(300));
  testing::expect_all_pass(2, [&](int rank, int n, std::shared_ptr<Store> store) {
    run_case(testing::make_comm(rank, n, store, 60), dlrm, data, ref, {2, 1, 1});
  });
}

TEST(Parallelize, WhatASpecCannotSplitIsRefusedByName) {
  testing::expect_all_pass(2, [&](int rank, int n, std::shared_ptr<Store> store) {
    auto world = testing::make_comm(rank, n, store, 60);
    Mesh tp2(world, 1, 2, 1), pp2(world, 1, 1, 2);
    testing::expect_refused(
        [&] {
          build(dlrm_spec(dlrm_config(), 1), tp2, {1, 2, 1});
        },
        "dlrm: tensor parallelism over 2 ranks is not built");
    testing::expect_refused(
        [&] {
          build(dlrm_spec(dlrm_config(), 1), pp2, {1, 1, 2});
        },
        "2 pipeline stages, but the model has only 1 units to cut between them");
    testing::expect_refused(
        [&] {
          build(mlp_spec({12, 15, 4}, 1), tp2, {1, 2, 1});
        },
        "MLP hidden size of fc1 15 is not divisible by the tensor-parallel size 2");
    ParallelOptions zero2;
    zero2.dp.zero = 2;
    testing::expect_refused([&] { parallelize(mlp_spec(kMlp4, 1), tp2, zero2); },
                            "ZeRO stage 2 beside tp or pp");
    ParallelOptions sp;
    sp.sequence_parallel = true;
    testing::expect_refused([&] { parallelize(mlp_spec(kMlp4, 1), tp2, sp); },
                            "mlp: sequence parallelism");
    // The refusals came before any collective: the group still works.
    auto model = build(mlp_spec(kMlp4, 1), tp2, {1, 2, 1});
    EXPECT_EQ(model->spec().name(), "mlp");
  });
}

}  // namespace
}  // namespace braid::parallel
