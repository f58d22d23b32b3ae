// braid ps train dlrm end to end with the real binary (BRAID_BIN): the
// embedding tables are sparse keys (rows pulled and pushed by id), the MLPs
// dense keys. BSP equals braid train dlrm --dp step by step, in its test
// log loss and in every final weight, tables included; ASP, SSP and k-of-n
// with a slowed worker train below the constant predictor's log loss.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "braid/checkpoint.h"
#include "braid/data.h"
#include "support/multiproc.h"
#include "support/tool.h"

namespace {

using braid::testing::braid_bin;
using braid::testing::read_json_lines;
using braid::testing::run_command;
using Log = std::vector<nlohmann::json>;

// Momentum 0 (and SGD's default weight decay 0): with dense table
// gradients, data parallel steps every row each step, and momentum (or
// decay) moves rows no batch named; a sparse push leaves them as they are.
// With plain SGD an untouched row's update is w -= lr·0 in data parallel
// too, so the two trainings are the same.
const std::string kSmall =
    " dlrm --steps 12 --batch 64 --threads 1 --quiet --samples 4096 --test-samples 1024 "
    "--features 4 --rows 300 --dim 8 --momentum 0";
constexpr size_t kSteps = 12;

Log run(const std::string& dir, const std::string& name, const std::string& args) {
  auto r = run_command(braid_bin() + args + " --json-log " + dir + "/" + name + ".jsonl" +
                       " --checkpoint " + dir + "/" + name + ".ckpt");
  EXPECT_EQ(r.status, 0) << args << "\n" << r.out;
  return read_json_lines(dir + "/" + name + ".jsonl");
}

TEST(PsDlrm, BspEqualsDataParallelStepByStep) {
  const std::string dir = braid::testing::temp_dir("ps_dlrm_bsp");
  Log dp = run(dir, "dp", " train" + kSmall + " --dp 2");
  Log bsp = run(dir, "bsp", " ps train" + kSmall + " --servers 2 --workers 2 --consistency bsp");
  ASSERT_EQ(dp.size(), kSteps + 1);
  ASSERT_EQ(bsp.size(), kSteps + 1);
  for (size_t i = 0; i < kSteps; ++i) {
    const double a = dp[i]["loss"], b = bsp[i]["loss"];
    EXPECT_NEAR(b, a, 1e-5 * a) << "step " << i;
    EXPECT_EQ(bsp[i]["loss_workers"], 2) << "step " << i;
    EXPECT_GE(double(bsp[i]["time"]), 0.0) << "step " << i;
  }
  const auto &da = dp.back(), &db = bsp.back();
  EXPECT_NEAR(double(db["test_log_loss"]), double(da["test_log_loss"]), 1e-5);
  // The floor and the constant predictor's loss: of the test split kSmall
  // names (4 dense features, bag 1, Zipf 1.1 and data seed 1 by default),
  // computed here.
  braid::nn::ClickConfig cfg;
  cfg.samples = 4096;
  cfg.test_samples = 1024;
  cfg.features = 4;
  cfg.rows = 300;
  const braid::nn::ClickData test(cfg, "test");
  EXPECT_DOUBLE_EQ(double(db["best_log_loss"]), test.best_log_loss());
  EXPECT_DOUBLE_EQ(double(db["base_log_loss"]), test.base_log_loss());
  EXPECT_DOUBLE_EQ(double(db["gap_to_floor"]), double(db["test_log_loss"]) - test.best_log_loss());
  EXPECT_EQ(db["rounds_closed"], nlohmann::json({int(kSteps), int(kSteps)}));

  // Every weight, the four tables included (each worker pulled only rows
  // its batches named; worker 0 pulled all of them at the end).
  braid::Checkpoint a = braid::load_checkpoint(dir + "/dp.ckpt"),
                    b = braid::load_checkpoint(dir + "/bsp.ckpt");
  size_t compared = 0, tables = 0;
  for (auto& [name, ta] : a.tensors) {
    if (name.rfind("model/", 0) != 0) continue;
    auto it = b.tensors.find(name);
    ASSERT_NE(it, b.tensors.end()) << name;
    ASSERT_EQ(it->second.numel(), ta.numel()) << name;
    const float *x = ta.f32(), *y = it->second.f32();
    double worst = 0;
    for (int64_t i = 0; i < ta.numel(); ++i) worst = std::max(worst, double(std::fabs(x[i] - y[i])));
    EXPECT_LE(worst, 1e-5) << name;
    ++compared;
    if (name.find("emb.") != std::string::npos) ++tables;
  }
  EXPECT_EQ(tables, 4u);
  EXPECT_GT(compared, tables);
}

TEST(PsDlrm, StragglerTolerantModesTrainBelowTheConstantPredictor) {
  const std::string dir = braid::testing::temp_dir("ps_dlrm_modes");
  const std::string base =
      " ps train dlrm --steps 40 --batch 64 --threads 1 --quiet --samples 8192 "
      "--test-samples 2048 --servers 2 --workers 3 --slow-worker 2:2 --consistency ";
  // ASP applies every push as its own step, W per round, each from a stale
  // pull: with momentum 0.9 that overshoots now and then in 40 steps (the
  // test loss ended at the constant predictor's once). Plain SGD there.
  for (const std::string mode : {"asp --momentum 0", "ssp --staleness 2", "kofn --round-k 2"}) {
    Log log = run(dir, mode.substr(0, 3), base + mode);
    ASSERT_FALSE(log.empty()) << mode;
    const auto& done = log.back();
    ASSERT_EQ(done["event"], "done") << mode;
    EXPECT_LT(double(done["test_log_loss"]), double(done["base_log_loss"])) << mode << ": "
                                                                            << done.dump();
    EXPECT_GT(double(done["test_log_loss"]), double(done["best_log_loss"])) << mode;
    EXPECT_GT(int64_t(done["pushes_accepted"]), 0) << mode;
  }
}

TEST(PsDlrm, RejectsGradientAccumulation) {
  auto r = run_command(braid_bin() + " ps train dlrm --steps 2 --accum 2 --workers 1");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--accum must be 1"), std::string::npos) << r.out;
}

}  // namespace
