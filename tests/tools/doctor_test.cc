// braid doctor as a user runs it: on this machine every section is there
// and the exit status is 0 (text and --json); a /dev/shm too small for the
// job — injected with --shm-size, and for real in a private mount
// namespace where the test may make one — is named and exits 1, as does
// the pthread build of OpenBLAS put first on LD_LIBRARY_PATH.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "braid/env.h"
#include "support/tool.h"

namespace {

using braid::testing::braid_bin;
using braid::testing::run_command;

const std::vector<std::string> kSections = {"cores",      "shm",        "blas",    "openmp",
                                            "thread_env", "ptrace",     "open_files",
                                            "network",    "tuning",     "all_reduce"};

// Thread settings of the test's own environment would change what is judged.
const std::string kClean = "env -u OMP_NUM_THREADS -u OPENBLAS_NUM_THREADS -u LD_LIBRARY_PATH ";

nlohmann::json parse_report(const std::string& out) {
  const size_t at = out.find('{');
  if (at == std::string::npos) return nullptr;
  return nlohmann::json::parse(out.substr(at), nullptr, false);
}

TEST(Doctor, TextReportHasEverySectionAndPasses) {
  const auto r = run_command(kClean + braid_bin() + " doctor");
  EXPECT_EQ(r.status, 0) << r.out;
  for (const auto& s : kSections)
    EXPECT_TRUE(r.out.find(" " + s + " ") != std::string::npos) << "no section " << s << "\n" << r.out;
  EXPECT_NE(r.out.find("0 failures"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("FAIL"), std::string::npos) << r.out;
}

TEST(Doctor, JsonReportHasEverySectionAndPasses) {
  const auto r = run_command(kClean + braid_bin() + " doctor --json");
  ASSERT_EQ(r.status, 0) << r.out;
  const nlohmann::json j = parse_report(r.out);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j["ok"], true);
  EXPECT_EQ(j["failures"], 0);
  for (const auto& s : kSections) {
    ASSERT_TRUE(j["checks"].contains(s)) << s << " missing:\n" << r.out;
    const auto& c = j["checks"][s];
    EXPECT_NE(c["status"], "FAIL") << s << ": " << c.dump();
    EXPECT_FALSE(c["summary"].get<std::string>().empty()) << s;
  }
  EXPECT_EQ(j["checks"]["blas"]["data"]["threading"], "openmp");
  EXPECT_EQ(j["checks"]["openmp"]["data"]["runtimes"].size(), 1u);
  EXPECT_GT(j["checks"]["shm"]["data"]["need_bytes"].get<double>(), 0);
  // The all_reduce ran: a row per size, each beside the model's figure.
  const auto& rows = j["checks"]["all_reduce"]["data"]["rows"];
  ASSERT_GE(rows.size(), 3u) << r.out;
  for (const auto& row : rows) {
    EXPECT_GT(row["time_us"].get<double>(), 0) << row.dump();
    EXPECT_GT(row["model_us"].get<double>(), 0) << row.dump();
  }
}

TEST(Doctor, TinyShmIsNamedAndFails) {
  auto r = run_command(kClean + braid_bin() + " doctor --shm-size 1M --no-all-reduce");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("FAIL  shm"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("/dev/shm is too small"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fix: give /dev/shm at least"), std::string::npos) << r.out;

  r = run_command(kClean + braid_bin() + " doctor --json --shm-size 1M --no-all-reduce -n 8");
  EXPECT_EQ(r.status, 1) << r.out;
  const nlohmann::json j = parse_report(r.out);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j["ok"], false);
  EXPECT_EQ(j["checks"]["shm"]["status"], "FAIL");
  EXPECT_EQ(j["checks"]["shm"]["data"]["ranks"], 8);
  EXPECT_EQ(j["checks"]["blas"]["status"], "ok") << "only the shared memory is wrong";
}

// A real tmpfs of 1 MiB on /dev/shm, in a mount namespace of its own: the
// transport's segments cannot be made, and the doctor's all_reduce fails
// with the transport's own message. `make test` runs as root (README), which
// may unshare and mount; a namespace that cannot be made fails the test.
TEST(Doctor, RealTinyShmInPrivateMountNamespace) {
  const std::string ns = "unshare -m sh -c 'mount -t tmpfs -o size=1M tmpfs /dev/shm && ";
  const auto probe = run_command(ns + "echo mounted'");
  ASSERT_NE(probe.out.find("mounted"), std::string::npos)
      << "cannot make a private mount namespace with a 1 MiB /dev/shm (the suite runs as root): "
      << probe.out;
  const auto r = run_command(ns + kClean + braid_bin() + " doctor --json'");
  EXPECT_EQ(r.status, 1) << r.out;
  const nlohmann::json j = parse_report(r.out);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j["checks"]["shm"]["status"], "FAIL") << r.out;
  EXPECT_EQ(j["checks"]["shm"]["data"]["size_bytes"], 1 << 20);
  EXPECT_EQ(j["checks"]["all_reduce"]["status"], "FAIL") << r.out;
  EXPECT_NE(j["checks"]["all_reduce"]["summary"].get<std::string>().find("shared memory"),
            std::string::npos)
      << r.out;
}

// The configuration braid is built to avoid, put back by a user's
// LD_LIBRARY_PATH: the doctor names the BLAS and fails.
TEST(Doctor, PthreadBlasFirstOnTheLibraryPathFails) {
  const std::string dir = "/usr/lib/x86_64-linux-gnu/openblas-pthread";
  ASSERT_TRUE(std::filesystem::exists(dir + "/libopenblas.so.0"))
      << "no pthread build of OpenBLAS at " << dir << " (scripts/deps.sh installs libopenblas0-pthread)";
  // Two threads per process, whatever the machine's cores: the case in which
  // the second pool takes cores from braid's (one thread would only warn).
  const auto r = run_command(kClean + "OMP_NUM_THREADS=2 LD_LIBRARY_PATH=" + dir + " " +
                             braid_bin() + " doctor --json --no-all-reduce");
  EXPECT_EQ(r.status, 1) << r.out;
  const nlohmann::json j = parse_report(r.out);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j["checks"]["blas"]["status"], "FAIL") << r.out;
  EXPECT_EQ(j["checks"]["blas"]["data"]["threading"], "pthreads");
  EXPECT_NE(j["checks"]["blas"]["fix"].get<std::string>().find("LD_LIBRARY_PATH"), std::string::npos);
}

}  // namespace
