// Fail-over through `braid ps train --replicas 2` with real processes: 2
// workers and 3 dedicated servers (shard s on the chain s, s+1 mod 3) train
// the MLP under BSP, and --kill-server SIGKILLs a server mid-training. The
// supervisor lets the job go on (server 0 is the head of shard 0's chain,
// server 1 its tail; one case runs self-forked, one under braid run).
// Training completes; for every shard the pushes and clocks the workers had
// acknowledged equal what the surviving tail accepted and closed; and the
// final weights are bit for bit those of the same job without a failure and
// of R = 1. A worker's death is not survivable, nor is a chain's last
// member's, nor any server's with R = 1: those jobs fail, naming who.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "braid/checkpoint.h"
#include "cli_test_util.h"
#include "support/multiproc.h"
#include "support/tool.h"

namespace {

using braid::testing::braid_bin;
using braid::testing::CommandResult;
using braid::testing::run_command;

constexpr int kSteps = 12, kWorkers = 2;
const std::string kJob = " ps train mlp --steps 12 --batch 60 --threads 1 --quiet --workers 2 "
                         "--consistency bsp --ps-timeout 60";

using Job = braid::testing::ps_cli::Job;

// `prefix` runs the tool (braid, or braid run -n N -- braid).
Job run(const std::string& dir, const std::string& name, const std::string& prefix,
        const std::string& args) {
  return braid::testing::ps_cli::run_job(dir, name, prefix + kJob + args);
}

// Every model tensor of `a` equals `b`'s bit for bit.
void expect_identical_weights(const std::string& a, const std::string& b, const std::string& what) {
  const braid::Checkpoint ca = braid::load_checkpoint(a), cb = braid::load_checkpoint(b);
  size_t compared = 0;
  for (const auto& [name, ta] : ca.tensors) {
    if (name.rfind("model/", 0) != 0) continue;
    const auto it = cb.tensors.find(name);
    ASSERT_NE(it, cb.tensors.end()) << what << ": " << name;
    ASSERT_EQ(it->second.numel(), ta.numel()) << what << ": " << name;
    int64_t differ = 0;
    for (int64_t i = 0; i < ta.numel(); ++i) differ += ta.f32()[i] != it->second.f32()[i];
    EXPECT_EQ(differ, 0) << what << ": " << name;
    ++compared;
  }
  EXPECT_EQ(compared, 6u) << what;
}

// The done record of a job whose server `victim` was killed at `step`.
void expect_failed_over(const Job& k, int victim, int step) {
  ASSERT_EQ(k.r.status, 0) << k.r.out;
  EXPECT_NE(k.r.out.find("was killed by signal 9 (SIGKILL); the job goes on (parameter server " +
                         std::to_string(victim)),
            std::string::npos)
      << k.r.out;
  ASSERT_EQ(k.log.size(), size_t(kSteps + 1));
  const nlohmann::json& done = k.log.back();
  EXPECT_EQ(done["steps_taken"], kSteps);
  EXPECT_EQ(done["dead_servers"], nlohmann::json::array({victim}));
  EXPECT_EQ(done["epoch"], 1);
  EXPECT_GE(done["reroutes"].get<int64_t>(), 1);
  ASSERT_EQ(done["failovers"].size(), 1u);
  const nlohmann::json& fo = done["failovers"][0];
  EXPECT_EQ(fo["server"], victim);
  EXPECT_EQ(fo["step"], step);
  // Measured (a push was acknowledged after the death); its size is the
  // benchmark's business, not a test's.
  EXPECT_GE(fo["failover_s"].get<double>(), 0.0);
  EXPECT_GE(fo["failover_s"].get<double>(), fo["push_s"].get<double>());
  EXPECT_EQ(k.log[size_t(step)]["killed_server"], victim);
  ASSERT_EQ(done["chains"].size(), 3u);
  int64_t acked = 0;
  for (const auto& c : done["chains"]) {
    SCOPED_TRACE("shard " + c["shard"].dump());
    EXPECT_EQ(c["pushes_acked"], c["tail_pushes_accepted"]);
    EXPECT_EQ(c["clocks_acked"], kWorkers * kSteps);
    EXPECT_EQ(c["tail_rounds_closed"], kSteps);
    EXPECT_EQ(c["tail_updates_applied"], kSteps);
    acked += c["pushes_acked"].get<int64_t>();
  }
  EXPECT_EQ(done["pushes_accepted"], acked);
}

TEST(PsChainCli, KillHeadAndTailMidTrainingTheJobCompletesAndLosesNothing) {
  const std::string dir = braid::testing::temp_dir("ps_chain_cli");
  const std::string self = braid_bin(), launched = braid_bin() + " run -n 5 -- " + braid_bin();
  const Job r1 = run(dir, "r1", self, " --servers 3");
  const Job r2 = run(dir, "r2", self, " --servers 3 --replicas 2");
  ASSERT_EQ(r1.r.status, 0) << r1.r.out;
  ASSERT_EQ(r2.r.status, 0) << r2.r.out;
  expect_identical_weights(r1.ckpt, r2.ckpt, "R=2 vs R=1");
  EXPECT_EQ(r2.log.back()["dead_servers"], nlohmann::json::array());
  EXPECT_EQ(r2.log.back()["failovers"], nlohmann::json::array());

  const Job head = run(dir, "head", self, " --servers 3 --replicas 2 --kill-server 0:5");
  expect_failed_over(head, 0, 5);
  expect_identical_weights(r2.ckpt, head.ckpt, "head killed vs no failure");

  const Job tail = run(dir, "tail", launched, " --servers 3 --replicas 2 --kill-server 1:7");
  expect_failed_over(tail, 1, 7);
  expect_identical_weights(r2.ckpt, tail.ckpt, "tail killed (braid run) vs no failure");
}

TEST(PsChainCli, LosingAChainsLastMemberOrAnUnreplicatedServerFailsTheJob) {
  const std::string dir = braid::testing::temp_dir("ps_chain_cli_fail");
  // Both members of every chain (2 servers, R = 2), one after the other.
  const Job both = run(dir, "both", braid_bin(),
                       " --servers 2 --replicas 2 --kill-server 0:3 --kill-server 1:6");
  EXPECT_NE(both.r.status, 0) << both.r.out;
  EXPECT_NE(both.r.out.find("the job goes on (parameter server 0"), std::string::npos) << both.r.out;
  EXPECT_NE(both.r.out.find("the job goes on (parameter server 1"), std::string::npos) << both.r.out;
  EXPECT_NE(both.r.out.find(": parameter-server worker "), std::string::npos) << both.r.out;
  EXPECT_NE(both.r.out.find("every server of its chain of 2 is dead"), std::string::npos)
      << both.r.out;
  EXPECT_NE(both.r.out.find(") exited with status 1; stopped the other"), std::string::npos)
      << both.r.out;

  // R = 1: the server's death ends the job at once, named by the supervisor.
  const Job one = run(dir, "one", braid_bin(), " --servers 2 --kill-server 1:3");
  EXPECT_EQ(one.r.status, 137) << one.r.out;
  EXPECT_NE(one.r.out.find("braid ps: rank 3 (pid "), std::string::npos) << one.r.out;
  EXPECT_NE(one.r.out.find("was killed by signal 9 (SIGKILL); stopped the other 3 ranks"),
            std::string::npos)
      << one.r.out;
  EXPECT_EQ(one.r.out.find("the job goes on"), std::string::npos) << one.r.out;
}

TEST(PsChainCli, KillServerFlagIsChecked) {
  for (const std::string bad : {"3:1", "x:1", "0:", "0:-1", "1", ":4", "0:99"}) {
    const CommandResult r = run_command(braid_bin() + kJob + " --servers 3 --replicas 2 --kill-server " +
                                        bad + " 2>&1");
    EXPECT_NE(r.status, 0) << bad;
    EXPECT_NE(r.out.find("--kill-server"), std::string::npos) << bad << ": " << r.out;
  }
  const CommandResult co = run_command(braid_bin() + kJob +
                                       " --servers 2 --placement colocated --kill-server 0:1 2>&1");
  EXPECT_NE(co.status, 0);
  EXPECT_NE(co.out.find("--kill-server needs --placement dedicated"), std::string::npos) << co.out;
}

}  // namespace
