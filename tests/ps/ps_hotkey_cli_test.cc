// braid ps train dlrm --hot-keys end to end with the real binary
// (BRAID_BIN): the click data's ids are Zipf-popular with id 0 the most
// popular (braid/data.h), so under BSP the hottest rows' reads go to
// replicas, read from the servers' counters in the JSON log, while the
// training is the same as without --hot-keys (every loss and weight).
// Under SSP, replicas gate their reads by the same staleness as owners: with
// s = 0 the training is BSP's, and with s = 2 a worker reads hot rows from
// replicas s rounds ahead of a held-back one.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "support/multiproc.h"
#include "support/tool.h"
#include "support/weights.h"

namespace {

using braid::testing::braid_bin;
using braid::testing::read_json_lines;
using braid::testing::run_command;
using Log = std::vector<nlohmann::json>;

constexpr int kServers = 3, kSteps = 16, kTables = 4;
const std::string kJob =
    " ps train dlrm --steps 16 --batch 64 --threads 1 --quiet --samples 4096 --test-samples 1024 "
    "--features 4 --rows 2000 --dim 8 --servers 3 --workers 2 --hot-every 4 --hot-max-rows 4";

Log run(const std::string& dir, const std::string& name, const std::string& args) {
  auto r = run_command(braid_bin() + kJob + args + " --json-log " + dir + "/" + name +
                       ".jsonl --checkpoint " + dir + "/" + name + ".ckpt");
  EXPECT_EQ(r.status, 0) << args << "\n" << r.out;
  return read_json_lines(dir + "/" + name + ".jsonl");
}

int64_t sum(const nlohmann::json& a) {
  int64_t s = 0;
  for (const auto& v : a) s += v.get<int64_t>();
  return s;
}

TEST(PsHotKeysCli, HottestRowsAreReadFromReplicasAndBspTrainingIsUnchanged) {
  const std::string dir = braid::testing::temp_dir("ps_hot_cli");
  const Log off = run(dir, "off", " --consistency bsp");
  const Log on = run(dir, "on", " --consistency bsp --hot-keys");
  ASSERT_EQ(off.size(), size_t(kSteps + 1));
  ASSERT_EQ(on.size(), size_t(kSteps + 1));
  for (int i = 0; i < kSteps; ++i) EXPECT_EQ(on[i]["loss"], off[i]["loss"]) << "step " << i;
  // Every weight: the four tables and the two MLPs' ten tensors.
  const auto diffs = braid::testing::weight_diffs(dir + "/off.ckpt", dir + "/on.ckpt");
  size_t tables = 0;
  for (const auto& [name, worst] : diffs) {
    EXPECT_EQ(worst, 0.0) << name;
    tables += name.rfind("model/emb.", 0) == 0;
  }
  EXPECT_EQ(diffs.size(), size_t(kTables + 10));
  EXPECT_EQ(tables, size_t(kTables));
  EXPECT_EQ(on[1]["server_requests_per_s"].size(), size_t(kServers));
  EXPECT_EQ(on[1]["server_bytes_per_s"].size(), size_t(kServers));

  const nlohmann::json &a = off.back(), &b = on.back();
  EXPECT_TRUE(a["hot_rows"].empty());
  EXPECT_EQ(sum(a["server_pulls_replica"]), 0);
  EXPECT_EQ(sum(a["server_hot_rows"]), 0);
  // Row 0 of every table is the most popular id, and all of them live on
  // one server (a row's server depends on its id only), which makes its
  // hot_max_rows = 4 = kTables rows hot: those.
  int owner0 = -1;
  std::set<int64_t> tables_with_row0;
  for (const auto& h : b["hot_rows"]) {
    EXPECT_LT(h[1].get<int64_t>(), 20) << "row " << h[1] << " is not a popular id";
    if (h[1] == 0) {
      tables_with_row0.insert(h[0].get<int64_t>());
      owner0 = h[2];
    }
  }
  EXPECT_EQ(tables_with_row0.size(), size_t(kTables));
  ASSERT_GE(owner0, 0);
  // Every pull is served once, by the owner or a replica; replicas took
  // some, so row 0's owner served fewer than without hot keys.
  EXPECT_GT(sum(b["server_pulls_replica"]), 0);
  EXPECT_EQ(sum(b["server_pulls_owner"]) + sum(b["server_pulls_replica"]),
            sum(a["server_pulls_owner"]));
  EXPECT_LT(b["server_pulls_owner"][owner0].get<int64_t>(),
            a["server_pulls_owner"][owner0].get<int64_t>());
  // The load windows split at the first refresh (step 4): replicas serve
  // in the window after it, never without --hot-keys.
  EXPECT_EQ(b["load"]["split_step"], 4);
  EXPECT_GT(sum(b["load"]["after"]["pulls_replica"]), 0);
  EXPECT_EQ(sum(a["load"]["after"]["pulls_replica"]), 0);
  EXPECT_EQ(a["load"]["before"]["requests_per_s"].size(), size_t(kServers));
}

TEST(PsHotKeysCli, UnderSspReplicasServeReadsWithinTheStaleness) {
  const std::string dir = braid::testing::temp_dir("ps_hot_ssp");
  // s = 0 gates every read, a replica's included, as BSP does: the same
  // training as BSP without hot keys, bit for bit, with replicas serving.
  const Log off = run(dir, "off", " --consistency bsp");
  const Log s0 = run(dir, "ssp0", " --consistency ssp --staleness 0 --hot-keys");
  ASSERT_EQ(off.size(), size_t(kSteps + 1));
  ASSERT_EQ(s0.size(), size_t(kSteps + 1));
  // Worker 0's own loss of each step (SSP's logged `loss` is over the
  // reports in so far, which timing decides).
  for (int i = 0; i < kSteps; ++i)
    EXPECT_EQ(s0[i]["worker_loss"], off[i]["worker_loss"]) << "step " << i;
  const auto diffs = braid::testing::weight_diffs(dir + "/off.ckpt", dir + "/ssp0.ckpt");
  EXPECT_EQ(diffs.size(), size_t(kTables + 10));
  for (const auto& [name, worst] : diffs) EXPECT_EQ(worst, 0.0) << name;
  EXPECT_GT(sum(s0.back()["server_pulls_replica"]), 0);

  // s = 2, worker 1 held at step 9 (--hold-worker): worker 0 is served its
  // pull for clock 11 with rounds 0..8 closed, the hot rows of batch 11
  // (learned at the refresh of step 8) by replicas holding the owners'
  // refresh of round 8, not of round 10: were a replica to wait for that,
  // worker 0 could not get there and the job would fail (--ps-timeout).
  const Log s2 = run(dir, "ssp2", " --consistency ssp --staleness 2 --hot-keys "
                                  "--hold-worker 1:9 --ps-timeout 60");
  ASSERT_EQ(s2.size(), size_t(kSteps + 1));
  for (int i = 0; i < kSteps; ++i)
    EXPECT_LE(int64_t(s2[i]["read_lead"]), 2) << "step " << i << ": " << s2[i].dump();
  EXPECT_EQ(s2[11]["clocks"], nlohmann::json({11, 9}));
  EXPECT_EQ(s2[11]["read_lead"], 2);
  EXPECT_GT(sum(s2.back()["server_pulls_replica"]), 0);
  EXPECT_EQ(s2.back()["rounds_closed"], nlohmann::json({kSteps, kSteps, kSteps}));
}

TEST(PsHotKeysCli, RefusedWhereThereAreNoRowsOrNoRounds) {
  auto r = run_command(braid_bin() + kJob + " --consistency asp --hot-keys");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--hot-keys needs --consistency bsp or ssp"), std::string::npos) << r.out;
  r = run_command(braid_bin() + " ps train mlp --steps 2 --hot-keys");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--hot-keys needs sparse rows (dlrm)"), std::string::npos) << r.out;
}

}  // namespace
