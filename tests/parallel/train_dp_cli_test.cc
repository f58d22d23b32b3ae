// braid train --dp, end to end with the real binary (BRAID_BIN): the
// data-parallel log equals the single-process one, the JSON records carry
// the per-rank time split, `braid run` ranks join the job they are given,
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

std::vector<nlohmann::json> read_log(const std::string& path) {
  std::vector<nlohmann::json> v;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line))
    if (!line.empty()) v.push_back(nlohmann::json::parse(line));
  return v;
}

const std::string kSmall = " mlp --steps 12 --batch 60 --threads 1 --quiet";

TEST(TrainDp, Dp3LogMatchesSingleProcessAndHasTimeSplit) {
  std::string dir = braid::testing::temp_dir("traindp");
  Result one = sh(braid_bin() + " train" + kSmall + " --json-log " + dir + "/one.jsonl");
  ASSERT_EQ(one.status, 0) << one.out;
  Result dp = sh(braid_bin() + " train" + kSmall + " --dp 3 --zero 2 --ref-throughput 1000" +
                 " --json-log " + dir + "/dp.jsonl");
  ASSERT_EQ(dp.status, 0) << dp.out;
  auto a = read_log(dir + "/one.jsonl"), b = read_log(dir + "/dp.jsonl");
  ASSERT_EQ(a.size(), 13u);
  ASSERT_EQ(b.size(), 13u);
  for (size_t i = 0; i < 12; ++i) {
    double la = a[i]["loss"], lb = b[i]["loss"];
    EXPECT_NEAR(lb, la, 1e-5 * la) << "step " << i;
    for (const char* k : {"compute_s", "exposed_comm_s", "idle_s"}) {
      ASSERT_TRUE(b[i][k].is_array()) << k;
      EXPECT_EQ(b[i][k].size(), 3u) << k;
      for (auto& v : b[i][k]) EXPECT_GE(double(v), 0.0) << k;
    }
  }
  auto& done = b.back();
  EXPECT_EQ(done["event"], "done");
  EXPECT_EQ(done["dp"], 3);
  EXPECT_TRUE(done.contains("scaling_factor"));
  EXPECT_GT(double(done["test_accuracy"]), 0.5);
  EXPECT_FALSE(a.back().contains("scaling_factor"));
}

TEST(TrainDp, JoinsTheJobOfBraidRun) {
  std::string dir = braid::testing::temp_dir("traindprun");
  Result r = sh(braid_bin() + " run -n 2 -- " + braid_bin() + " train" + kSmall +
                " --zero 1 --json-log " + dir + "/log.jsonl");
  ASSERT_EQ(r.status, 0) << r.out;
  auto v = read_log(dir + "/log.jsonl");
  ASSERT_EQ(v.size(), 13u) << r.out;
  EXPECT_EQ(v.back()["dp"], 2);
  EXPECT_EQ(v[0]["compute_s"].size(), 2u);
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
