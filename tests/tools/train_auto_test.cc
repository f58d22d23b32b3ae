// braid train --auto, end to end with the real binary: for the world it is
// given it prints the layout the planner chose and why, trains in exactly
// that layout (the done record's dp, tp, pp and micro-batches are the
// printed ones), and the run's losses equal the one-process run's, as any
// layout's do. Flags that fix the layout, and models it does not plan, are
// refused by name.
#include <gtest/gtest.h>

#include <cstdio>
#include <regex>
#include <string>

#include "support/multiproc.h"
#include "support/tool.h"
#include "support/weights.h"

namespace {

using braid::testing::braid_bin;
using braid::testing::run_command;

const std::string kTiny =
    " train gpt --steps 4 --batch 8 --layers 2 --d-model 32 --heads 4 --context 16 --threads 1 "
    "--quiet";

TEST(TrainAuto, RunsThePlannedLayoutAndTrainsAsOneProcess) {
  const std::string dir = braid::testing::temp_dir("train_auto");
  auto one = run_command(braid_bin() + kTiny + " --json-log " + dir + "/one.jsonl");
  ASSERT_EQ(one.status, 0) << one.out;
  for (int world : {2, 4}) {
    const std::string log = dir + "/auto" + std::to_string(world) + ".jsonl";
    auto r = run_command(braid_bin() + kTiny + " --auto --world " + std::to_string(world) +
                         " --json-log " + log);
    ASSERT_EQ(r.status, 0) << r.out;
    std::smatch m;
    const std::regex chose("braid train --auto: " + std::to_string(world) +
                           R"( ranks, \d+ layouts estimated; chose tp=(\d+) pp=(\d+) dp=(\d+) .*\((\d+) micro-batches\), predicted [0-9.]+ s a step)");
    ASSERT_TRUE(std::regex_search(r.out, m, chose)) << r.out;
    EXPECT_NE(r.out.find("  why: "), std::string::npos) << r.out;
    const auto a = braid::testing::read_json_lines(dir + "/one.jsonl");
    const auto b = braid::testing::read_json_lines(log);
    ASSERT_FALSE(b.empty()) << r.out;
    const auto& done = b.back();
    EXPECT_EQ(done["tp"], std::stoi(m[1])) << r.out;
    EXPECT_EQ(done["pp"], std::stoi(m[2])) << r.out;
    EXPECT_EQ(done["dp"], std::stoi(m[3])) << r.out;
    EXPECT_EQ(done["micro_batches"], std::stoi(m[4])) << r.out;
    EXPECT_EQ(std::stoi(m[1]) * std::stoi(m[2]) * std::stoi(m[3]), world);
    braid::testing::expect_same_losses(a, b, "--auto at " + std::to_string(world));
  }
}

TEST(TrainAuto, RefusesAFixedLayoutAndModelsItDoesNotPlan) {
  auto r = run_command(braid_bin() + kTiny + " --auto --tp 2");
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("--auto chooses --tp itself"), std::string::npos) << r.out;
  r = run_command(braid_bin() + " train dlrm --steps 2 --auto");
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("--auto plans gpt and mlp, not 'dlrm'"), std::string::npos) << r.out;
  r = run_command(braid_bin() + kTiny + " --auto --world 0");
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("--world must be a whole number of at least 1, not '0'"),
            std::string::npos)
      << r.out;
}

}  // namespace
