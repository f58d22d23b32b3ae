// braid train --dp, end to end with the real binary (BRAID_BIN): the
// data-parallel log equals the single-process one, the JSON records carry
// the per-rank time split, gradient buckets are shared unless
// --private-buckets, `braid run` ranks join the job they are given,
// and a rank killed in the middle of a step stops the job with a message
// naming it.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "braid/env.h"
#include "support/tool.h"
#include "support/multiproc.h"

namespace {

using braid::testing::braid_bin;


struct Result {
  int status = -1;
  std::string out;  // stdout and stderr
  double seconds = 0;
};

Result sh(const std::string& cmd) {
  Result r;
  double t0 = braid::now_s();
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  r.seconds = braid::now_s() - t0;
  return r;
}

const std::string kSmall = " mlp --steps 12 --batch 60 --threads 1 --quiet";
constexpr size_t kSteps = 12;

// The single-process log of kSmall, made once.
const std::vector<nlohmann::json>& serial_log() {
  static std::vector<nlohmann::json> log = [] {
    std::string dir = braid::testing::temp_dir("trainone");
    Result one = sh(braid_bin() + " train" + kSmall + " --json-log " + dir + "/one.jsonl");
    EXPECT_EQ(one.status, 0) << one.out;
    return braid::testing::read_json_lines(dir + "/one.jsonl");
  }();
  return log;
}

// A data-parallel log equals the serial one: every step's loss over the
// global batch, the final loss and the test accuracy of the final weights.
void expect_same_training(const std::vector<nlohmann::json>& b, const std::string& what) {
  const auto& a = serial_log();
  ASSERT_EQ(a.size(), kSteps + 1);
  ASSERT_EQ(b.size(), kSteps + 1) << what;
  for (size_t i = 0; i < kSteps; ++i) {
    double la = a[i]["loss"], lb = b[i]["loss"];
    EXPECT_NEAR(lb, la, 1e-5 * la) << what << ", step " << i;
  }
  const auto &da = a.back(), &db = b.back();
  EXPECT_EQ(db["event"], "done") << what;
  EXPECT_NEAR(double(db["final_loss"]), double(da["final_loss"]), 1e-5 * double(da["final_loss"])) << what;
  // Weights equal to float rounding give the same argmax on all but a
  // handful of the 10 000 test images.
  EXPECT_NEAR(double(db["test_accuracy"]), double(da["test_accuracy"]), 1e-3) << what;
}

TEST(TrainDp, LayoutsMatchSingleProcessAndReportTheirTimeSplit) {
  std::string dir = braid::testing::temp_dir("traindp");
  ASSERT_FALSE(serial_log().back().contains("scaling_factor"));
  for (const char* layout : {"--dp 3 --zero 2", "--dp 2 --plain", "--dp 2 --zero 3 --bucket-reduce background"}) {
    const int world = layout[5] - '0';
    Result dp = sh(braid_bin() + " train" + kSmall + " " + layout + " --ref-throughput 1000" +
                   " --json-log " + dir + "/dp.jsonl");
    ASSERT_EQ(dp.status, 0) << layout << ": " << dp.out;
    auto b = braid::testing::read_json_lines(dir + "/dp.jsonl");
    expect_same_training(b, layout);
    ASSERT_EQ(b.size(), kSteps + 1) << layout;
    auto& done = b.back();
    EXPECT_EQ(done["dp"], world) << layout;
    // Every rank's split of every step: no part negative, some compute on
    // every rank, and the parts of all steps within the job's wall time.
    // The done record's exposed-communication fraction is the steps'
    // (those after the 2 warm-up steps of a 12-step run), rank by rank.
    for (int r = 0; r < world; ++r) {
      double compute = 0, all = 0, m_comm = 0, m_all = 0;
      for (size_t i = 0; i < kSteps; ++i) {
        double step = 0;
        for (const char* k : {"compute_s", "exposed_comm_s", "idle_s"}) {
          ASSERT_TRUE(b[i][k].is_array()) << k;
          ASSERT_EQ(b[i][k].size(), size_t(world)) << k;
          const double v = b[i][k][r];
          EXPECT_GE(v, 0.0) << layout << " " << k << " rank " << r << " step " << i;
          step += v;
        }
        compute += double(b[i]["compute_s"][r]);
        all += step;
        if (i >= 2) {
          m_comm += double(b[i]["exposed_comm_s"][r]);
          m_all += step;
        }
      }
      EXPECT_GT(compute, 0.0) << layout << " rank " << r;
      EXPECT_LT(all, dp.seconds) << layout << " rank " << r;
      EXPECT_NEAR(double(done["exposed_comm_fraction"][r]), m_comm / m_all, 1e-9) << layout << " rank " << r;
    }
    // Throughput over world × the 1-rank reference given.
    EXPECT_NEAR(double(done["scaling_factor"]), double(done["samples_per_s"]) / (world * 1000.0),
                1e-9 * double(done["scaling_factor"]))
        << layout;
  }
}

// Gradient buckets lie in shared memory by default (reduced in place by
// the "shared" all-reduce); --private-buckets keeps them in private memory,
// training the same; where the buckets are private anyway the flag is
// refused, naming why.
TEST(TrainDp, PrivateBucketsTrainTheSameAndAreRefusedWhereTheyMeanNothing) {
  std::string dir = braid::testing::temp_dir("traindppriv");
  int run = 0;
  for (const char* layout : {"--dp 2", "--dp 2 --private-buckets", "--dp 3 --zero 1",
                             "--dp 3 --zero 1 --private-buckets"}) {
    const std::string log = dir + "/run" + std::to_string(run++) + ".jsonl";
    Result r = sh(braid_bin() + " train" + kSmall + " " + layout + " --json-log " + log);
    ASSERT_EQ(r.status, 0) << layout << ": " << r.out;
    auto v = braid::testing::read_json_lines(log);
    expect_same_training(v, layout);
    ASSERT_FALSE(v.empty()) << layout;
    const bool private_buckets = std::string(layout).find("--private-buckets") != std::string::npos;
    EXPECT_EQ(v.back()["shared_buckets"], !private_buckets) << layout;
  }
  for (const auto& [flags, why] :
       {std::pair<std::string, std::string>{"--zero 2", "--zero 2 and 3 (sharded gradients)"},
        {"--zero 3", "--zero 2 and 3 (sharded gradients)"},
        {"--plain", "--plain (no buckets)"},
        {"--bf16-grads", "--bf16-grads (sent from a staging copy)"}}) {
    Result r = sh(braid_bin() + " train" + kSmall + " --dp 2 --private-buckets " + flags);
    EXPECT_NE(r.status, 0) << flags << ": " << r.out;
    EXPECT_NE(r.out.find("--private-buckets applies to the shared-memory gradient buckets of "
                         "ZeRO 0/1 with f32 gradients; with " + why +
                         " the gradients are in private memory already"),
              std::string::npos)
        << flags << ": " << r.out;
  }
  // A model-parallel run takes no data-parallel bucket flags.
  Result r = sh(braid_bin() + " train gpt --steps 2 --batch 8 --layers 2 --d-model 32 --heads 4 "
                              "--context 16 --threads 1 --quiet --tp 2 --private-buckets");
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("--private-buckets"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("done:"), std::string::npos) << r.out;
}

TEST(TrainDp, JoinsTheJobOfBraidRun) {
  std::string dir = braid::testing::temp_dir("traindprun");
  Result r = sh(braid_bin() + " run -n 2 -- " + braid_bin() + " train" + kSmall +
                " --zero 1 --json-log " + dir + "/log.jsonl");
  ASSERT_EQ(r.status, 0) << r.out;
  auto v = braid::testing::read_json_lines(dir + "/log.jsonl");
  ASSERT_EQ(v.size(), 13u) << r.out;
  EXPECT_EQ(v.back()["dp"], 2);
  EXPECT_EQ(v[0]["compute_s"].size(), 2u);
  expect_same_training(v, "braid run -n 2");
}

TEST(TrainDp, KilledRankStopsTheJobAndIsNamed) {
  Result r = sh("BRAID_DP_KILL=1:4 BRAID_TIMEOUT=30 " + braid_bin() +
                " train mlp --steps 400 --batch 60 --threads 1 --quiet --dp 3");
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("rank 1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("killed by signal 9"), std::string::npos) << r.out;
  EXPECT_LT(r.seconds, 30.0) << r.out;
}

}  // namespace
