// braid plan as a user runs it: --json prints one object per layout, best
// first, with the documented keys; fixed flags hold; a bad cluster file
// fails naming the field.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "support/tool.h"

namespace {

using braid::testing::braid_bin;
using braid::testing::parse_json_lines;
using braid::testing::run_command;

TEST(PlanTool, JsonLinesBestFirstWithTheDocumentedKeys) {
  const auto r = run_command(braid_bin() +
                             " plan --model gpt:layers=24,hidden=2048,heads=16,seq=2048,vocab=51200"
                             " --cluster dgx-h100 --gpus 64 --batch 512 --top 4 --json 2>&1");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto rows = parse_json_lines(r.out);
  ASSERT_EQ(rows.size(), 4u) << r.out;
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& j = rows[i];
    for (const char* k : {"step_s", "tflops_per_device", "mfu", "memory_bytes_per_device", "bubble",
                          "comm_bytes", "layout", "exposed_comm_s"})
      EXPECT_TRUE(j.contains(k)) << k;
    EXPECT_EQ(j["rank"], int(i + 1));
    EXPECT_GT(j["mfu"].get<double>(), 0);
    EXPECT_LT(j["mfu"].get<double>(), 1);
    EXPECT_LE(j["memory_bytes_per_device"].get<double>(), 80.0 * (1ull << 30));
    EXPECT_TRUE(j["comm_bytes"].is_object());
    if (i) {
      EXPECT_LE(rows[i - 1]["step_s"].get<double>(), j["step_s"].get<double>());
    }
  }
  EXPECT_TRUE(rows[0].contains("why"));
}

TEST(PlanTool, FixedFlagsHold) {
  const auto r = run_command(braid_bin() +
                             " plan --model gpt-18b --cluster dgx-a100 --gpus 64 --batch 256"
                             " --tp 8 --pp 2 --schedule 1f1b --zero 1 --recompute full --json 2>&1");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto rows = parse_json_lines(r.out);
  ASSERT_FALSE(rows.empty());
  for (const auto& j : rows) {
    EXPECT_EQ(j["layout"]["tp"], 8);
    EXPECT_EQ(j["layout"]["pp"], 2);
    EXPECT_EQ(j["layout"]["dp"], 4);
    EXPECT_EQ(j["layout"]["schedule"], "1f1b");
    EXPECT_EQ(j["layout"]["zero"], 1);
    EXPECT_EQ(j["layout"]["recompute"], "full");
  }
}

TEST(PlanTool, TextNamesTheWinnerAndWhy) {
  const auto r = run_command(braid_bin() +
                             " plan --model gpt:layers=4,hidden=256,heads=4,seq=128,vocab=256"
                             " --cluster this-machine --gpus 2 --batch 16 2>&1");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("#1 tp="), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("why #1:"), std::string::npos) << r.out;
}

TEST(PlanTool, BadClusterFileNamesTheField) {
  const std::string path = ::testing::TempDir() + "/bad_cluster.json";
  std::ofstream(path) << R"({"name":"x","device":{"name":"d","peak_tflops":{"bf16":100},
    "memory_bw_gbytes_per_s":1000,"gemm_efficiency":[[1e9,0.5]]},"devices_per_host":8,
    "intra_host":"nvlink4","inter_host":"ib-ndr"})";
  const auto r = run_command(braid_bin() + " plan --model gpt-18b --cluster " + path +
                             " --gpus 8 --batch 8 2>&1");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("device.memory_gib: missing"), std::string::npos) << r.out;
  std::remove(path.c_str());
}

TEST(PlanTool, ShowClusterWritesAFileThatPlansAlike) {
  const std::string path = ::testing::TempDir() + "/h100_cluster.json";
  const auto shown = run_command(braid_bin() + " plan --cluster dgx-h100 --show-cluster > " + path);
  ASSERT_EQ(shown.status, 0) << shown.out;
  const std::string args = " --model gpt-18b --gpus 16 --batch 64 --top 2 --json";
  const auto a = run_command(braid_bin() + " plan --cluster dgx-h100" + args);
  const auto b = run_command(braid_bin() + " plan --cluster " + path + args);
  ASSERT_EQ(a.status, 0) << a.out;
  ASSERT_EQ(b.status, 0) << b.out;
  const auto ra = parse_json_lines(a.out), rb = parse_json_lines(b.out);
  ASSERT_EQ(ra.size(), rb.size());
  for (size_t i = 0; i < ra.size(); ++i) {
    EXPECT_EQ(ra[i]["layout"], rb[i]["layout"]);
    EXPECT_NEAR(ra[i]["step_s"].get<double>(), rb[i]["step_s"].get<double>(), 1e-9 * ra[i]["step_s"].get<double>());
  }
  std::remove(path.c_str());
}

}  // namespace
