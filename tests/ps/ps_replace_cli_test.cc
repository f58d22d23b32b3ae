// Spare servers through `braid ps train --replicas 2 --spare-servers N`,
// with real processes: 2 workers and 3 dedicated servers (shard s on the
// chain s, s+1 mod 3) train the MLP under BSP while --kill-server SIGKILLs
// a server; a spare then joins, by state transfer, every chain the dead
// server was in. Asserted from the JSON log's done record: training
// completes; per shard the pushes and clocks the workers had acknowledged
// equal what the final tail applied; every chain ends with 2 live members,
// the spare among them where the dead server was; the join names its
// shards, the tails that handed them over, the epochs and a measured write
// pause; and the final weights are bit for bit those of the same job
// without a failure. An idle spare exits with the job; a spare needs chains.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "cli_test_util.h"
#include "support/multiproc.h"
#include "support/tool.h"
#include "support/weights.h"

namespace {

using braid::testing::braid_bin;
using braid::testing::CommandResult;
using braid::testing::run_command;

constexpr int kSteps = 30, kWorkers = 2, kServers = 3;
const std::string kJob = " ps train mlp --steps 30 --batch 60 --threads 1 --quiet --workers 2 "
                         "--servers 3 --replicas 2 --consistency bsp --ps-timeout 60";

using Job = braid::testing::ps_cli::Job;

// `prefix` runs the tool (braid, or braid run -n N -- braid).
Job run(const std::string& dir, const std::string& name, const std::string& prefix,
        const std::string& args) {
  return braid::testing::ps_cli::run_job(dir, name, prefix + kJob + args);
}

void expect_identical_weights(const std::string& a, const std::string& b, const std::string& what) {
  const auto diffs = braid::testing::weight_diffs(a, b);
  EXPECT_EQ(diffs.size(), 6u) << what;
  for (const auto& [name, d] : diffs) EXPECT_EQ(d, 0.0) << what << ": " << name;
}

std::set<int> as_set(const nlohmann::json& a) {
  std::set<int> s;
  for (const auto& x : a) s.insert(x.get<int>());
  return s;
}

// The chains of the done record: nothing acknowledged was lost or applied
// twice at the final tails, and each has `members`.
void expect_chains(const nlohmann::json& done, const std::vector<std::set<int>>& members) {
  ASSERT_EQ(done["chains"].size(), size_t(kServers));
  int64_t acked = 0;
  for (const auto& c : done["chains"]) {
    const int s = c["shard"].get<int>();
    SCOPED_TRACE("shard " + std::to_string(s));
    EXPECT_EQ(c["pushes_acked"], c["tail_pushes_accepted"]);
    EXPECT_EQ(c["clocks_acked"], kWorkers * kSteps);
    EXPECT_EQ(c["tail_rounds_closed"], kSteps);
    EXPECT_EQ(c["tail_updates_applied"], kSteps);
    EXPECT_EQ(c["members"].size(), 2u) << c["members"];
    EXPECT_EQ(as_set(c["members"]), members.at(size_t(s))) << c["members"];
    acked += c["pushes_acked"].get<int64_t>();
  }
  EXPECT_EQ(done["pushes_accepted"], acked);
}

// One join record: spare `spare` (server id `id`) replaced `dead` in the
// chains of `shards`, each handed over by its last live original member.
void expect_join(const nlohmann::json& j, int spare, int id, int dead, const std::set<int>& shards) {
  SCOPED_TRACE("join " + j.dump());
  ASSERT_FALSE(j.contains("error"));
  EXPECT_EQ(j["spare"], spare);
  EXPECT_EQ(j["id"], id);
  EXPECT_EQ(j["replaced"], dead);
  EXPECT_EQ(j["rank"], kWorkers + kServers + spare);
  // Measured; their sizes are the benchmark's business (bench/ps_failover.sh).
  EXPECT_GE(j["rejoin_s"].get<double>(), 0.0);
  std::set<int> got;
  uint32_t last_epoch = 0;
  for (const auto& s : j["shards"]) {
    got.insert(s["shard"].get<int>());
    EXPECT_GT(s["pause_s"].get<double>(), 0.0);
    EXPECT_NE(s["tail"], dead);
    EXPECT_NE(s["tail"], -1);
    EXPECT_GT(s["epoch"].get<uint32_t>(), last_epoch);  // each join is a new epoch
    last_epoch = s["epoch"].get<uint32_t>();
  }
  EXPECT_EQ(got, shards);
}

TEST(PsReplaceCli, KilledServersAreReplacedBySparesAndNothingIsLost) {
  const std::string dir = braid::testing::temp_dir("ps_replace_cli");
  const std::string self = braid_bin();
  const Job base = run(dir, "base", self, "");
  ASSERT_EQ(base.r.status, 0) << base.r.out;

  // An idle spare: the job ends as without it, nothing joined.
  const Job idle = run(dir, "idle", self, " --spare-servers 1");
  ASSERT_EQ(idle.r.status, 0) << idle.r.out;
  EXPECT_EQ(idle.log.back()["joins"], nlohmann::json::array());
  EXPECT_EQ(idle.log.back()["epoch"], 0);
  expect_identical_weights(base.ckpt, idle.ckpt, "an idle spare vs none");

  // Server 0, head of shard 0 and tail of shard 2, killed at step 5: spare
  // 0 (server id 3) joins shards 0 and 2.
  const Job head = run(dir, "head", self, " --spare-servers 1 --kill-server 0:5");
  ASSERT_EQ(head.r.status, 0) << head.r.out;
  EXPECT_NE(head.r.out.find("the job goes on (parameter server 0"), std::string::npos) << head.r.out;
  ASSERT_EQ(head.log.size(), size_t(kSteps + 1));
  const nlohmann::json& hd = head.log.back();
  EXPECT_EQ(hd["steps_taken"], kSteps);
  EXPECT_EQ(hd["dead_servers"], nlohmann::json::array({0}));
  EXPECT_EQ(hd["epoch"], 3);  // one death, two joins
  EXPECT_EQ(hd["spare_servers"], 1);
  ASSERT_EQ(hd["joins"].size(), 1u);
  expect_join(hd["joins"][0], 0, 3, 0, {0, 2});
  expect_chains(hd, {{1, 3}, {1, 2}, {2, 3}});
  expect_identical_weights(base.ckpt, head.ckpt, "head killed, spare joined vs no failure");

  // Under braid run, two deaths and two spares: server 1 at step 4 (spare
  // 0 or 1 joins shards 0 and 1), then server 2 at step 15, which the
  // other spare replaces in shards 1 and 2.
  const Job two = run(dir, "two", braid_bin() + " run -n 7 -- " + braid_bin(),
                      " --spare-servers 2 --kill-server 1:4 --kill-server 2:15");
  ASSERT_EQ(two.r.status, 0) << two.r.out;
  const nlohmann::json& td = two.log.back();
  EXPECT_EQ(td["dead_servers"], nlohmann::json::array({1, 2}));
  EXPECT_EQ(td["epoch"], 6);  // two deaths, four joins
  ASSERT_EQ(td["joins"].size(), 2u) << td["joins"];
  const nlohmann::json& first = td["joins"][0];
  const int s1 = first["spare"].get<int>();
  expect_join(first, s1, 3, 1, {0, 1});
  expect_join(td["joins"][1], 1 - s1, 4, 2, {1, 2});
  expect_chains(td, {{0, 3}, {3, 4}, {0, 4}});
  expect_identical_weights(base.ckpt, two.ckpt, "two servers replaced vs no failure");
}

TEST(PsReplaceCli, SpareServersFlagIsChecked) {
  const std::string job = " ps train mlp --steps 4 --batch 60 --threads 1 --quiet --workers 2 "
                          "--servers 2 --consistency bsp";
  struct Bad {
    std::string args, says;
  };
  for (const Bad& b : {Bad{" --spare-servers 1", "--spare-servers needs --replicas >= 2"},
                       Bad{" --replicas 2 --placement colocated --spare-servers 1",
                           "--spare-servers needs --placement dedicated"},
                       Bad{" --replicas 2 --spare-servers -1", "--spare-servers must be >= 0"}}) {
    const CommandResult r = run_command(braid_bin() + job + b.args + " 2>&1");
    EXPECT_NE(r.status, 0) << b.args;
    EXPECT_NE(r.out.find(b.says), std::string::npos) << b.args << ": " << r.out;
  }
  // Launched with too few ranks for the spares.
  const CommandResult n = run_command(braid_bin() + " run -n 4 -- " + braid_bin() + job +
                                      " --replicas 2 --spare-servers 1 2>&1");
  EXPECT_NE(n.status, 0);
  EXPECT_NE(n.out.find("and 1 spares need 5 ranks, the job has 4"), std::string::npos) << n.out;
  const CommandResult help = run_command(braid_bin() + " ps train --help 2>&1");
  EXPECT_NE(help.out.find("--spare-servers"), std::string::npos) << help.out;
}

}  // namespace
