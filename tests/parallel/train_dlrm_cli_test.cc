// braid train dlrm, end to end with the real binary (BRAID_BIN): the
// data-parallel runs (real forked ranks; the embedding tables' dense
// gradients all-reduced like any parameter) equal the single-process run
// step by step, the done record reports the test log loss beside the
// floor and the constant predictor's loss of the click data its flags name
// (computed here from the library's ClickData), --zipf skews which rows
// training touches as a Zipf law should, and bad workload flags are refused
// by name.
#include <gtest/gtest.h>

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
using braid::testing::run_command;

const std::string kSmall =
    " dlrm --steps 24 --samples 4096 --test-samples 1024 --batch 64 --features 3 --rows 200"
    " --dim 8 --threads 1 --quiet";
constexpr size_t kSteps = 24;

// The test split kSmall names (the defaults: 4 dense features, bag 1, Zipf
// 1.1, data seed 1).
const braid::nn::ClickData& test_split() {
  static const braid::nn::ClickData d = [] {
    braid::nn::ClickConfig c;
    c.samples = 4096;
    c.test_samples = 1024;
    c.features = 3;
    c.rows = 200;
    return braid::nn::ClickData(c, "test");
  }();
  return d;
}

std::vector<nlohmann::json> train(const std::string& extra, const std::string& dir) {
  const std::string log = dir + "/log.jsonl";
  auto r = run_command(braid_bin() + " train" + kSmall + extra + " --json-log " + log);
  EXPECT_EQ(r.status, 0) << extra << ": " << r.out;
  EXPECT_NE(r.out.find("test log loss"), std::string::npos) << r.out;
  return braid::testing::read_json_lines(log);
}

}  // namespace

TEST(TrainDlrm, DataParallelEqualsSerialStepByStep) {
  const std::string dir = braid::testing::temp_dir("traindlrm");
  const auto serial = train("", dir);
  ASSERT_EQ(serial.size(), kSteps + 1);
  const auto& sd = serial.back();
  ASSERT_EQ(sd["event"], "done");
  EXPECT_EQ(sd["model"], "dlrm");
  ASSERT_TRUE(sd.contains("samples_per_s"));
  // The floor and the constant predictor's loss are those of the data the
  // flags name; the gap is the difference of the two logged losses.
  EXPECT_DOUBLE_EQ(double(sd["best_log_loss"]), test_split().best_log_loss());
  EXPECT_DOUBLE_EQ(double(sd["base_log_loss"]), test_split().base_log_loss());
  EXPECT_LT(double(sd["best_log_loss"]), double(sd["base_log_loss"]));
  EXPECT_NEAR(double(sd["gap_to_floor"]),
              double(sd["test_log_loss"]) - double(sd["best_log_loss"]), 1e-12);
  EXPECT_LT(double(sd["test_log_loss"]), double(serial.front()["loss"]))
      << "24 steps should improve on the first batch's loss";

  for (const char* layout :
       {" --dp 2", " --dp 3 --zero 1", " --dp 2 --zero 3", " --dp 2 --plain"}) {
    const auto dp = train(layout, dir);
    ASSERT_EQ(dp.size(), kSteps + 1) << layout;
    for (size_t i = 0; i < kSteps; ++i) {
      const double a = serial[i]["loss"], b = dp[i]["loss"];
      EXPECT_NEAR(b, a, 1e-5 * a) << layout << ", step " << i;
    }
    const auto& dd = dp.back();
    EXPECT_EQ(dd["dp"], std::string(layout).substr(6, 1) == "3" ? 3 : 2) << layout;
    EXPECT_NEAR(double(dd["test_log_loss"]), double(sd["test_log_loss"]),
                1e-5 * double(sd["test_log_loss"]))
        << layout;
    EXPECT_DOUBLE_EQ(double(dd["best_log_loss"]), test_split().best_log_loss()) << layout;
  }
}

// Ids are drawn with P(k) ∝ (k+1)^−zipf (braid/data.h). With momentum 0
// and no weight decay a table row that no batch named keeps its initial
// values, so the rows that changed are the ids the 24 batches' 1536
// samples named. Per table, how many of the 10 most popular ids, of the 500
// least popular and of all were named is within 4 standard deviations of
// what the law of the run's --zipf predicts (the distinct values among
// 1536 independent draws, from ClickData::zipf_probability): --zipf 1.2
// names every popular id, about 300 ids in all and 60 rare ones; uniform
// (--zipf 0) about 785 and 390.
TEST(TrainDlrm, ZipfSkewsTheIdsTrainingTouches) {
  const std::string dir = braid::testing::temp_dir("traindlrm_zipf");
  constexpr int64_t kRows = 1000, kDim = 8, kFeatures = 3, kDraws = 24 * 64;
  const std::string job = " train dlrm --samples 4096 --test-samples 1024 --batch 64 "
                          "--features 3 --rows 1000 --dim 8 --threads 1 --quiet --momentum 0 "
                          "--dp 2";
  auto run = [&](const std::string& name, const std::string& args) {
    auto r = run_command(braid_bin() + job + args + " --checkpoint " + dir + "/" + name +
                         ".ckpt 2>&1");
    EXPECT_EQ(r.status, 0) << args << ": " << r.out;
    return braid::load_checkpoint(dir + "/" + name + ".ckpt");
  };
  // The initial weights: one step at learning rate 0.
  const braid::Checkpoint init = run("init", " --steps 1 --lr 0");
  // Ids [lo, hi) whose row `ck` changed against `init` in table f.
  auto touched = [&](const braid::Checkpoint& ck, int64_t f, int64_t lo, int64_t hi) {
    const std::string name = "model/emb." + std::to_string(f) + ".weight";
    const auto a = init.tensors.find(name), b = ck.tensors.find(name);
    if (a == init.tensors.end() || b == ck.tensors.end() || a->second.numel() != kRows * kDim ||
        b->second.numel() != kRows * kDim) {
      ADD_FAILURE() << name << " is missing or not [" << kRows << ", " << kDim << "]";
      return int64_t(-1);
    }
    int64_t n = 0;
    for (int64_t r = lo; r < hi; ++r)
      for (int64_t j = 0; j < kDim; ++j)
        if (a->second.f32()[r * kDim + j] != b->second.f32()[r * kDim + j]) {
          ++n;
          break;
        }
    return n;
  };
  for (const double zipf : {0.0, 1.2}) {
    const std::string name = zipf == 0.0 ? "uniform" : "zipf";
    const braid::Checkpoint ck =
        run(name, " --steps 24 --zipf " + std::string(zipf == 0.0 ? "0" : "1.2"));
    for (const auto& [lo, hi] : {std::pair<int64_t, int64_t>{0, 10}, {kRows / 2, kRows}, {0, kRows}}) {
      // Id k is named with probability q = 1 − (1 − p_k)^draws.
      double mean = 0, var = 0;
      for (int64_t k = lo; k < hi; ++k) {
        const double q =
            1 - std::pow(1 - braid::nn::ClickData::zipf_probability(kRows, zipf, k), double(kDraws));
        mean += q;
        var += q * (1 - q);
      }
      for (int64_t f = 0; f < kFeatures; ++f)
        EXPECT_NEAR(double(touched(ck, f, lo, hi)), mean, 4 * std::sqrt(var) + 1)
            << name << ", table " << f << ", ids " << lo << ".." << hi - 1;
    }
  }
}

TEST(TrainDlrm, RefusesBadWorkloadFlagsByName) {
  for (const auto& [flag, word] : std::vector<std::pair<std::string, std::string>>{
           {"--rows 0", "rows"}, {"--zipf -1", "zipf"}, {"--features 0", "features"},
           {"--interaction outer", "interaction"}}) {
    auto r = run_command(braid_bin() + " train dlrm --steps 1 --threads 1 " + flag);
    EXPECT_NE(r.status, 0) << flag;
    EXPECT_NE(r.out.find(word), std::string::npos) << flag << ": " << r.out;
  }
}
