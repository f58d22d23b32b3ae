// `braid plan --simulate-collective` and `--simulate`: the tool prints the
// simulated time beside the closed form, writes a Chrome trace that parses,
// and names bad input.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "support/tool.h"

namespace {

using braid::testing::braid_bin;
using braid::testing::parse_json_lines;
using braid::testing::run_command;

TEST(PlanSimCli, CollectiveBesideItsClosedFormWithATrace) {
  const std::string trace = ::testing::TempDir() + "plan_sim_cli_trace.json";
  const auto r = run_command(braid_bin() +
                             " plan --simulate-collective all_reduce --algo hier --ranks 64 "
                             "--bytes 64M --cluster dgx-h100 --json --trace " + trace);
  ASSERT_EQ(r.status, 0) << r.out;
  const auto lines = parse_json_lines(r.out);
  ASSERT_EQ(lines.size(), 1u) << r.out;
  const nlohmann::json& j = lines[0];
  EXPECT_EQ(j["algorithm"], "hier");
  EXPECT_EQ(j["ranks"], 64);
  // 8 hosts: the leaders' ring pipelines, and the simulation overlaps what
  // the formula adds (docs/PLAN.md): a little under it.
  EXPECT_GT(double(j["ratio"]), 0.9);
  EXPECT_LT(double(j["ratio"]), 1.02);
  EXPECT_GT(double(j["bytes_by_link"]["inter_host"]), 0);
  std::ifstream f(trace);
  std::stringstream text;
  text << f.rdbuf();
  const nlohmann::json t = nlohmann::json::parse(text.str());
  ASSERT_TRUE(t["traceEvents"].is_array());
  size_t spans = 0;
  for (const auto& e : t["traceEvents"]) spans += e["ph"] == "X";
  EXPECT_GT(spans, 64u);
  std::remove(trace.c_str());
}

TEST(PlanSimCli, AutoTakesThePlannersChoice) {
  const auto r = run_command(braid_bin() +
                             " plan --simulate-collective all_reduce --ranks 16 --bytes 4K "
                             "--cluster dgx-h100 --json");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto j = parse_json_lines(r.out).at(0);
  EXPECT_NE(j["algorithm"], "auto");
  EXPECT_GT(double(j["simulated_s"]), 0);
}

TEST(PlanSimCli, LayoutsReplayTheirPipelineAndDataParallelCollectives) {
  const auto r = run_command(braid_bin() +
                             " plan --model gpt:layers=24,hidden=2048,heads=16,seq=2048,vocab=51200"
                             " --cluster dgx-h100 --gpus 64 --batch 256 --tp 2 --pp 4 --top 1"
                             " --simulate --json");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto lines = parse_json_lines(r.out);
  ASSERT_EQ(lines.size(), 2u) << r.out;  // the layout, then its simulation
  const nlohmann::json& sim = lines[1];
  // The same schedule and stage times: the pipelines agree closely.
  EXPECT_NEAR(double(sim["pipeline"]["ratio"]), 1.0, 0.05) << sim.dump();
  ASSERT_TRUE(sim.contains("dp all_reduce")) << sim.dump();
  EXPECT_GT(double(sim["dp all_reduce"]["simulated_s"]), 0) << sim.dump();
}

TEST(PlanSimCli, BadInputIsNamed) {
  auto r = run_command(braid_bin() + " plan --simulate-collective all_reduce --ranks 8");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--bytes"), std::string::npos) << r.out;
  r = run_command(braid_bin() +
                  " plan --simulate-collective all_reduce --algo nope --ranks 8 --bytes 1M");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("unknown algorithm 'nope'"), std::string::npos) << r.out;
}

}  // namespace
