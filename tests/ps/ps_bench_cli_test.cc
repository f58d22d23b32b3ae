// braid ps bench with the real binary: both modes fork their servers and
// workers, time every worker's push_pulls and print one JSON record with
// the rate; bad sizes are refused with a message naming the flag.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "support/tool.h"

namespace {

using braid::testing::braid_bin;
using braid::testing::run_command;

nlohmann::json last_json_line(const std::string& out) {
  const size_t at = out.rfind("\n{");
  return nlohmann::json::parse(out.substr(at == std::string::npos ? 0 : at + 1));
}

TEST(PsBench, DenseAndSparseReportTheirRates) {
  auto r = run_command(braid_bin() + " ps bench --mode dense --bytes 65536 --iters 3 --json");
  ASSERT_EQ(r.status, 0) << r.out;
  nlohmann::json d = last_json_line(r.out);
  EXPECT_EQ(d["mode"], "dense");
  EXPECT_EQ(d["bytes"], 65536);
  EXPECT_EQ(d["servers"], 2);
  EXPECT_EQ(d["workers"], 2);
  EXPECT_GT(double(d["algbw_gbs"]), 0.0);

  r = run_command(braid_bin() +
                  " ps bench --mode sparse --rows 5000 --keys 300 --iters 3 --workers 3 --json");
  ASSERT_EQ(r.status, 0) << r.out;
  nlohmann::json s = last_json_line(r.out);
  EXPECT_EQ(s["mode"], "sparse");
  EXPECT_EQ(s["keys"], 300);
  EXPECT_EQ(s["workers"], 3);
  EXPECT_GT(double(s["keys_per_s_per_server"]), 0.0);
}

TEST(PsBench, RejectsMoreKeysThanRowsAndOddSizes) {
  auto r = run_command(braid_bin() + " ps bench --mode sparse --rows 10 --keys 11");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--keys 11 exceeds --rows 10"), std::string::npos) << r.out;
  r = run_command(braid_bin() + " ps bench --mode dense --bytes 6");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("multiples of 4"), std::string::npos) << r.out;
}

}  // namespace
