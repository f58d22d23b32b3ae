// braid bench as a user runs it: every collective at 3 ranks reports zero
// wrong elements; JSON rows carry nccl-tests' fields; --list-algos names
// every registered algorithm; bad flags are errors.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "braid/env.h"
#include "braid/plan_probe.h"
#include "comm/algo/registry.h"
#include "comm/algo/select.h"
#include "support/multiproc.h"
#include "support/tool.h"

namespace {

std::string bin() { return braid::testing::braid_bin(); }

int run(const std::string& cmd, std::string* out) {
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out->append(buf, n);
  int st = ::pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

}  // namespace

TEST(BenchTool, EveryCollectiveAtThreeRanksIsCorrect) {
  std::string out;
  int rc = run(bin() + " bench -n 3 --op all -b 8 -e 1M -f 32 --iters 2 --warmup 1 --json", &out);
  ASSERT_EQ(rc, 0) << out;
  std::istringstream is(out);
  std::string line;
  std::set<std::string> ops;
  int rows = 0;
  while (std::getline(is, line)) {
    if (line.empty() || line[0] != '{') continue;
    auto j = nlohmann::json::parse(line);
    for (const char* k : {"op", "bytes", "count", "dtype", "time_us", "algbw_gbs", "busbw_gbs", "wrong"})
      ASSERT_TRUE(j.contains(k)) << k << " missing in " << line;
    EXPECT_EQ(j["wrong"].get<int64_t>(), 0) << line;
    EXPECT_GT(j["time_us"].get<double>(), 0.0) << line;
    ops.insert(j["op"].get<std::string>());
    ++rows;
  }
  EXPECT_EQ(ops.size(), 8u) << out;
  EXPECT_GE(rows, 8 * 3);
}

TEST(BenchTool, HalfPrecisionAndTcpAreChecked) {
  std::string out;
  ASSERT_EQ(run(bin() + " bench -n 4 --op all_reduce --dtype bf16 -b 2 -e 4M -f 64 --iters 2", &out), 0) << out;
  EXPECT_NE(out.find("# OK: 0 wrong"), std::string::npos) << out;
  out.clear();
  ASSERT_EQ(run(bin() + " bench -n 2 --transport tcp --op reduce_scatter -b 64 -e 1M -f 64 --iters 2", &out), 0) << out;
  EXPECT_NE(out.find("# OK: 0 wrong"), std::string::npos) << out;
}

TEST(BenchTool, SharedBuffersTakeTheSharedPathAndAreChecked) {
  std::string out;
  ASSERT_EQ(run(bin() + " bench -n 3 --shared --op all -b 64 -e 1M -f 16 --iters 2 --json", &out), 0)
      << out;
  std::istringstream is(out);
  std::string line;
  int shared_rows = 0;
  while (std::getline(is, line)) {
    if (line.empty() || line[0] != '{') continue;
    auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["wrong"].get<int64_t>(), 0) << line;
    if (j["op"] == "all_reduce" && j["bytes"].get<size_t>() >= 1024) {
      EXPECT_EQ(j["algo"], "shared") << line;
      ++shared_rows;
    }
  }
  EXPECT_GE(shared_rows, 2) << out;
}

// `braid bench --list-algos`: one line per collective of the registry, in
// its order, naming every algorithm of it in tie-break order, and the
// README's table says the same.
TEST(BenchTool, ListAlgosNamesEveryRegisteredAlgorithm) {
  std::string out;
  ASSERT_EQ(run(bin() + " bench --list-algos", &out), 0) << out;
  std::vector<std::pair<std::string, std::string>> listed;  // collective, "a, b"
  std::istringstream is(out);
  std::string line;
  while (std::getline(is, line)) {
    const size_t gap = line.find(' ');
    ASSERT_NE(gap, std::string::npos) << line;
    listed.emplace_back(line.substr(0, gap), line.substr(line.find_first_not_of(' ', gap)));
  }
  std::vector<std::pair<std::string, std::string>> registry;
  size_t algorithms = 0;
  for (const auto& c : braid::comm::algo::collectives()) {
    std::string names;
    for (const auto* a : braid::comm::algo::algorithms(c.op)) {
      names += (names.empty() ? "" : ", ") + a->name;
      ++algorithms;
    }
    registry.emplace_back(c.name, names);
  }
  EXPECT_GE(registry.size(), 10u);
  EXPECT_GE(algorithms, 20u);
  EXPECT_EQ(listed, registry) << out;

  const char* src = std::getenv("BRAID_SOURCE_DIR");
  const std::string dir =
      src ? src : std::filesystem::path(__FILE__).parent_path().parent_path().parent_path().string();
  std::ifstream f(dir + "/README.md");
  ASSERT_TRUE(f.good()) << dir;
  std::stringstream readme;
  readme << f.rdbuf();
  const std::string text = readme.str();
  const size_t at = text.find("### Collective algorithms");
  ASSERT_NE(at, std::string::npos);
  const std::string table = text.substr(at, text.find("\n## ", at) - at);
  std::vector<std::pair<std::string, std::string>> in_readme;
  const std::regex row("\n\\| `([a-z_]+)` \\| ([a-z, ]+?) \\|");
  for (std::sregex_iterator it(table.begin(), table.end(), row), end; it != end; ++it)
    in_readme.emplace_back((*it)[1], (*it)[2]);
  EXPECT_EQ(in_readme, listed) << "the README's algorithm table and --list-algos differ";
}

TEST(BenchTool, BadFlagsAreClearErrors) {
  std::string out;
  EXPECT_NE(run(bin() + " bench -n 2 --dtype f8", &out), 0);
  EXPECT_NE(out.find("f8"), std::string::npos) << out;
  out.clear();
  EXPECT_NE(run(bin() + " bench -n 2 -b 1X", &out), 0);
  EXPECT_NE(out.find("1X"), std::string::npos) << out;
  out.clear();
  EXPECT_NE(run(bin() + " bench -n 2 --warmup-s -1", &out), 0);
  EXPECT_NE(out.find("--warmup-s"), std::string::npos) << out;
}

// --warmup-s: each size warms up for that long (every rank making the
// same calls, or the job would hang or fail), then is timed and checked.
TEST(BenchTool, WarmUpForAGivenTimeThenTimeAndCheck) {
  std::string out;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string cmd = " bench -n 3 -b 1K -e 4K --warmup 0 --warmup-s 0.2 --iters 3 --json";
  ASSERT_EQ(run(bin() + cmd, &out), 0) << out;
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::istringstream is(out);
  std::string line;
  int rows = 0;
  while (std::getline(is, line)) {
    if (line.empty() || line[0] != '{') continue;
    const auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["wrong"], 0) << line;
    ++rows;
  }
  EXPECT_EQ(rows, 3) << out;  // 1, 2 and 4 KiB
  EXPECT_GE(wall, 3 * 0.2) << out;
}

// `braid bench --probe` writes calibrated figures the cost model can read,
// or, when its ranks shared their cores with other work (a parallel ctest
// may do that for a while; one core always does), says so and writes
// nothing.
TEST(BenchTool, ProbeWritesCalibratedFiguresOrRefusesADisturbedProbe) {
  const std::string file = braid::testing::temp_dir("probe_out") + "/tuning.json";
  const bool own_cores = braid::usable_cores() >= 2;
  std::string out;
  int rc = -1;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  do {
    out.clear();
    rc = run("BRAID_PROBE=0 " + bin() + " bench -n 2 --probe --probe-out " + file, &out);
    if (rc == 0) break;
    ASSERT_NE(out.find("of a core each"), std::string::npos) << out;
    ASSERT_FALSE(std::filesystem::exists(file)) << "a refused probe wrote " << file;
  } while (own_cores && std::chrono::steady_clock::now() < give_up);
  if (!own_cores) {
    EXPECT_NE(rc, 0) << "2 ranks on one core had a core each: " << out;
    return;
  }
  ASSERT_EQ(rc, 0) << "every probe for 90 s shared its cores: " << out;
  const std::string text = braid::comm::read_tuning_file(file);
  ASSERT_FALSE(text.empty()) << "no " << file << ": " << out;
  auto j = nlohmann::json::parse(text);
  // The model's figures are the built-in ones (α 1 µs, 9 GB/s, reduce
  // 10 GB/s) scaled by at most 4× either way.
  const double alpha = j["shm"]["alpha_us"].get<double>(), gbps = j["shm"]["gbps"].get<double>();
  EXPECT_TRUE(alpha >= 0.25 && alpha <= 4.0) << text;
  EXPECT_TRUE(gbps >= 9.0 / 4 && gbps <= 9.0 * 4) << text;
  EXPECT_GT(j["probed"]["shm"]["gbps"].get<double>(), 0) << text;
  EXPECT_NE(out.find("model shm"), std::string::npos) << out;
  // The probe's line starting with `head` says where its figures went:
  // "not kept" (the core was shared meanwhile) and the tuning file has no
  // `entry`, or it has one with a positive `field`.
  auto kept_as_said = [&](const std::string& head, const char* entry, const char* field) {
    const size_t at = out.find(head);
    ASSERT_NE(at, std::string::npos) << out;
    if (out.substr(at, out.find('\n', at) - at).find("not kept") == std::string::npos) {
      ASSERT_TRUE(j.contains(entry)) << text;
      EXPECT_GT(j[entry][field].get<double>(), 0) << text;
    } else {
      EXPECT_FALSE(j.contains(entry)) << text;
    }
  };
  // And the memory the simulator's this-machine copies through, where
  // sysfs names the last-level cache (braid/plan_probe.h).
  if (braid::plan::last_level_cache_bytes() > 0) kept_as_said("memory over shm", "shm_memory", "beyond_gbps");
  // And the device: the GEMM curve, and the element-wise passes' rates.
  EXPECT_EQ(j["gemm_f32_1thread"].size(), 6u) << text;
  kept_as_said("element-wise f32", "elementwise_f32_1thread", "gelu_gbps");
}
