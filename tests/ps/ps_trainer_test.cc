// ps::WorkerTrainer (braid/ps_trainer.h) used as a library, as `braid ps
// train` uses it: one server and two workers in one process train an MLP
// under BSP with plain SGD on the server. A BSP round applies the mean of
// the workers' pushes, the same step as nn::Trainer with nn::Sgd over the
// whole global batch in one process, so after the same steps every
// parameter matches that run's, and both workers took every step.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "braid/models.h"
#include "braid/optim.h"
#include "braid/ps.h"
#include "braid/store.h"
#include "braid/trainer.h"
#include "support/multiproc.h"

namespace {

namespace nn = braid::nn;
namespace ps = braid::ps;

constexpr int kWorkers = 2;
constexpr int64_t kSteps = 6, kBatch = 16, kIn = 6, kClasses = 3;
const std::vector<int64_t> kSizes = {kIn, 8, kClasses};

// 64 fixed samples: x a smooth function of the index, y its class.
class Points : public nn::Dataset {
 public:
  int64_t size() const override { return 64; }
  int64_t targets_per_sample() const override { return 1; }
  void gather(const int64_t* idx, int64_t n, braid::Tensor& x, braid::Tensor& y) const override {
    x.resize({n, kIn}, braid::DType::kF32);
    y.resize({n}, braid::DType::kI32);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < kIn; ++j) x.f32()[i * kIn + j] = float(std::sin(0.3 * idx[i] + j));
      y.i32()[i] = int32_t(idx[i] % kClasses);
    }
  }
};

nn::TrainOptions train_options(int rank, int world) {
  nn::TrainOptions o;
  o.global_batch = kBatch;
  o.seed = 5;
  o.rank = rank;
  o.world = world;
  return o;
}

nn::LrSchedule schedule() {
  nn::LrSchedule s;
  s.base = 0.1f;
  return s;
}

TEST(PsTrainer, BspWorkersTrainAsOneProcessDoes) {
  // The reference: one process, the whole global batch per step.
  Points data;
  auto ref = nn::make_mlp(kSizes, 1);
  nn::Sgd sgd;
  nn::Trainer one(*ref, data, sgd, schedule(), train_options(0, 1));
  for (int64_t s = 0; s < kSteps; ++s) one.step();
  {  // training moved the parameters, so matching them says something
    auto fresh = nn::make_mlp(kSizes, 1);
    EXPECT_NE(fresh->parameters()[0]->data.f32()[0], ref->parameters()[0]->data.f32()[0]);
  }

  auto store = braid::make_file_store(braid::testing::temp_dir("ps_trainer"));
  const std::string secret = "ps-trainer-test-0123456789abcdef";
  // Every process builds the same model, so the keys and the servers'
  // initial values come from any copy.
  auto model0 = nn::make_mlp(kSizes, 1);
  ps::Layout layout(1);
  std::vector<std::vector<float>> init;
  ps::ModelKeys keys0(*model0, model0->parameters());
  keys0.add_keys(layout, init);
  ps::ServerOptions so;
  so.workers = kWorkers;
  so.secret = secret;
  so.lr = schedule();
  ps::Server server(layout, so, store, init);

  std::vector<std::unique_ptr<nn::Sequential>> models(kWorkers);
  std::vector<int64_t> taken(kWorkers, -1);
  std::vector<std::thread> threads;
  for (int w = 0; w < kWorkers; ++w)
    threads.emplace_back([&, w] {
      models[size_t(w)] = nn::make_mlp(kSizes, 1);
      nn::Sequential& model = *models[size_t(w)];
      ps::ModelKeys keys(model, model.parameters());
      ps::WorkerOptions wo;
      wo.rank = w;
      wo.secret = secret;
      ps::Worker worker(layout, wo, store);
      nn::Sgd unused;  // the servers run the optimizer
      ps::TrainerOptions po;
      po.worker = w;
      po.workers = kWorkers;
      po.steps = kSteps;
      ps::WorkerTrainer trainer(worker, store, keys, model, data, unused, schedule(),
                                train_options(w, kWorkers), po);
      taken[size_t(w)] = trainer.train();
      trainer.pull_final(kSteps);
      worker.finish();
    });
  for (auto& t : threads) t.join();
  server.wait_finished(std::chrono::seconds(30));

  const auto want = ref->parameters();
  for (int w = 0; w < kWorkers; ++w) {
    EXPECT_EQ(taken[size_t(w)], kSteps) << "worker " << w;
    const auto got = models[size_t(w)]->parameters();
    ASSERT_EQ(got.size(), want.size());
    for (size_t p = 0; p < got.size(); ++p)
      for (int64_t i = 0; i < got[p]->size(); ++i)
        ASSERT_NEAR(got[p]->data.f32()[i], want[p]->data.f32()[i], 1e-5)
            << "worker " << w << ", " << got[p]->name << "[" << i << "]";
  }
}

}  // namespace
