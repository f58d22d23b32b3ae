// braid train dlrm, end to end with the real binary (BRAID_BIN): the
// data-parallel runs (real forked ranks; the embedding tables' dense
// gradients all-reduced like any parameter) equal the single-process run
// step by step, the done record reports the test log loss beside the
// floor and the constant predictor's loss of the click data its flags name
// (computed here from the library's ClickData), and bad workload flags are
// refused by name.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

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

TEST(TrainDlrm, RefusesBadWorkloadFlagsByName) {
  for (const auto& [flag, word] : std::vector<std::pair<std::string, std::string>>{
           {"--rows 0", "rows"}, {"--zipf -1", "zipf"}, {"--features 0", "features"},
           {"--interaction outer", "interaction"}}) {
    auto r = run_command(braid_bin() + " train dlrm --steps 1 --threads 1 " + flag);
    EXPECT_NE(r.status, 0) << flag;
    EXPECT_NE(r.out.find(word), std::string::npos) << flag << ": " << r.out;
  }
}
