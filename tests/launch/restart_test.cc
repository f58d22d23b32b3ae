// braid run --max-restarts, end to end with the real binary: a data-parallel
// job whose rank 1 dies in step 15 (BRAID_DP_KILL, which fires in the first
// run only) is restarted once, resumes from its newest checkpoint (step 10)
// and finishes; under BRAID_DETERMINISTIC=1 every step's loss and the final
// weights equal the uninterrupted run's bit for bit. The JSON log keeps both
// runs, a restart record between them. A job that keeps failing is started
// 1 + N times and ends with its status. A job over two test hosts restarts
// on both together.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/host_launch.h"
#include "support/multiproc.h"
#include "support/test_hosts.h"
#include "support/tool.h"
#include "support/weights.h"

namespace {

using braid::testing::braid_bin;
using braid::testing::CommandResult;
using braid::testing::run_command;

size_t count(const std::string& s, const std::string& needle) {
  size_t n = 0;
  for (size_t at = s.find(needle); at != std::string::npos; at = s.find(needle, at + 1)) ++n;
  return n;
}

// Each step's loss, the last record of it winning (a restart repeats steps).
std::map<int64_t, double> losses(const std::vector<nlohmann::json>& log) {
  std::map<int64_t, double> by_step;
  for (const auto& r : log)
    if (r.contains("step") && r.contains("loss") && !r.contains("event"))
      by_step[r["step"].get<int64_t>()] = r["loss"].get<double>();
  return by_step;
}

TEST(Restart, ADeadRankRestartsTheJobFromItsCheckpointAndEndsAsIfUninterrupted) {
  const std::string dir = braid::testing::temp_dir("restart");
  const std::string train = braid_bin() + " train mlp --steps 30 --batch 60 --threads 1 --quiet";
  const std::string env = "BRAID_DETERMINISTIC=1 ";
  CommandResult ref = run_command(env + braid_bin() + " run -n 2 -- " + train + " --json-log " +
                                  dir + "/ref.jsonl --checkpoint " + dir + "/ref.ck");
  ASSERT_EQ(ref.status, 0) << ref.out;

  CommandResult r = run_command(env + "BRAID_DP_KILL=1:15 " + braid_bin() +
                                " run -n 2 --max-restarts 1 -- " + train + " --json-log " + dir +
                                "/run.jsonl --checkpoint " + dir + "/run.ck --checkpoint-every 10");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(count(r.out, "restarting the job (restart 1 of 1)"), 1u) << r.out;
  EXPECT_NE(r.out.find("restart 1: resuming from " + dir + "/run.ck"), std::string::npos) << r.out;

  const auto a = braid::testing::read_json_lines(dir + "/ref.jsonl");
  const auto b = braid::testing::read_json_lines(dir + "/run.jsonl");
  // The first run logged steps 0-14 (rank 1 died in step 15), the restart
  // record, then steps 10-29 again from the step-10 checkpoint, then done.
  size_t restarts = 0, first_after = 0;
  for (size_t i = 0; i < b.size(); ++i)
    if (b[i].value("event", "") == "restart") {
      ++restarts;
      EXPECT_EQ(b[i]["restart"], 1);
      EXPECT_EQ(b[i]["resume_from"], dir + "/run.ck");
      ASSERT_LT(i + 1, b.size());
      first_after = size_t(b[i + 1]["step"].get<int64_t>());
    }
  EXPECT_EQ(restarts, 1u) << r.out;
  EXPECT_EQ(first_after, 10u) << "the restart resumed elsewhere than the step-10 checkpoint";
  const auto want = losses(a), got = losses(b);
  ASSERT_EQ(want.size(), 30u);
  EXPECT_EQ(got, want) << "losses differ from the uninterrupted run's";
  EXPECT_EQ(b.back()["event"], "done");
  EXPECT_EQ(b.back()["final_loss"], a.back()["final_loss"]);
  const auto diffs = braid::testing::weight_diffs(dir + "/ref.ck", dir + "/run.ck");
  EXPECT_FALSE(diffs.empty());
  for (const auto& [name, d] : diffs) EXPECT_EQ(d, 0.0) << name;
}

TEST(Restart, AJobThatKeepsFailingRunsOnePlusNTimesAndKeepsItsStatus) {
  CommandResult r = run_command(braid_bin() +
                                " run -n 2 --max-restarts 2 -- sh -c 'echo run $BRAID_RESTART_COUNT "
                                "$TORCHELASTIC_RESTART_COUNT; exit 3'");
  EXPECT_EQ(r.status, 3) << r.out;
  for (const char* run : {"run 0 0", "run 1 1", "run 2 2"})
    EXPECT_EQ(count(r.out, run), 2u) << run << "\n" << r.out;  // once per rank
  EXPECT_EQ(count(r.out, "restarting the job"), 2u) << r.out;
  EXPECT_EQ(r.out.find("run 3"), std::string::npos) << r.out;
  // Without --max-restarts nothing restarts.
  r = run_command(braid_bin() + " run -n 1 -- sh -c 'exit 4'");
  EXPECT_EQ(r.status, 4) << r.out;
  EXPECT_EQ(r.out.find("restarting"), std::string::npos) << r.out;
}

// The same job over two test hosts (one rank each), every launcher with
// --max-restarts 1: rank 1, on node1, dies in step 15; both nodes stop
// their ranks, meet again at node 0's fresh store, and run on from the
// step-10 checkpoint to the uninterrupted run's losses and weights.
TEST(Restart, AMultiNodeJobRestartsOnEveryNodeTogether) {
  BRAID_TEST_HOSTS(hosts, 2);
  const std::string dir = braid::testing::temp_dir("restart_hosts");
  const std::string train = braid_bin() + " train mlp --steps 30 --batch 60 --threads 1 --quiet";
  const auto ref = braid::testing::launch_on_hosts(
      *hosts, 1, train + " --json-log " + dir + "/ref.jsonl --checkpoint " + dir + "/ref.ck", dir,
      std::chrono::seconds(120), "BRAID_DETERMINISTIC=1");
  ASSERT_EQ(ref.status[0], 0) << ref.all();
  ASSERT_EQ(ref.status[1], 0) << ref.all();
  const auto l = braid::testing::launch_on_hosts(
      *hosts, 1,
      train + " --json-log " + dir + "/run.jsonl --checkpoint " + dir + "/run.ck --checkpoint-every 10",
      dir, std::chrono::seconds(180), "BRAID_DETERMINISTIC=1 BRAID_DP_KILL=1:15", "--max-restarts 1");
  ASSERT_EQ(l.status[0], 0) << l.all();
  ASSERT_EQ(l.status[1], 0) << l.all();
  for (int node = 0; node < 2; ++node)
    EXPECT_EQ(count(l.out[size_t(node)], "restarting the job (restart 1 of 1)"), 1u)
        << node << "\n" << l.all();
  const auto a = braid::testing::read_json_lines(dir + "/ref.jsonl");
  const auto b = braid::testing::read_json_lines(dir + "/run.jsonl");
  size_t restarts = 0;
  for (const auto& r : b) restarts += r.value("event", "") == "restart";
  EXPECT_EQ(restarts, 1u) << l.all();
  const auto want = losses(a), got = losses(b);
  ASSERT_EQ(want.size(), 30u);
  EXPECT_EQ(got, want) << "losses differ from the uninterrupted run's";
  const auto diffs = braid::testing::weight_diffs(dir + "/ref.ck", dir + "/run.ck");
  EXPECT_FALSE(diffs.empty());
  for (const auto& [name, d] : diffs) EXPECT_EQ(d, 0.0) << name;
}

}  // namespace
