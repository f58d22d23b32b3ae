// The compute-threads invariant of braid/threads.h: braid's own loops and
// the BLAS run on one OpenMP runtime — in this test binary, linked as a
// find_package(braid) consumer is, and in the braid tool as users run it —
// and the thread count a process picks from flags, environment and cores.
//
// These fail when braid is linked against the pthread build of OpenBLAS
// (Debian's default alternative), the configuration in which 2 threads ran
// at less than half the speed of 1.
#include <dirent.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "braid/env.h"
#include "braid/error.h"
#include "braid/kernels.h"
#include "braid/threads.h"
#include "support/multiproc.h"
#include "support/tool.h"

namespace braid {
namespace {

int threads_of_this_process() {
  int n = 0;
  DIR* d = ::opendir("/proc/self/task");
  if (d == nullptr) return -1;
  while (dirent* e = ::readdir(d))
    if (e->d_name[0] != '.') ++n;
  ::closedir(d);
  return n;
}

// Sets (or, with nullptr, unsets) a variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_) ::setenv(name_, old_.c_str(), 1);
    else ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

TEST(Threads, BlasIsTheOpenMPBuild) {
  const BlasInfo b = blas_info();
  EXPECT_EQ(b.threading, BlasThreading::kOpenMP)
      << "the BLAS loaded is " << b.library << " (" << b.config << "), which runs "
      << blas_threading_name(b.threading) << " threads: braid must link the OpenMP build "
      << "(cmake/braidOpenBLAS.cmake)";
  EXPECT_FALSE(b.core.empty());
}

TEST(Threads, OneOpenMPRuntimeIsLoaded) {
  const std::vector<std::string> rts = openmp_runtimes();
  ASSERT_EQ(rts.size(), 1u) << "OpenMP runtimes: " << ::testing::PrintToString(rts);
}

// The behaviour the invariant buys: after braid's parallel loop and a GEMM
// on 2 threads, the process has one pool of workers. With the pthread
// build, OpenBLAS keeps a pool of its own beside OpenMP's.
TEST(Threads, LoopsAndGemmShareOnePool) {
  set_num_threads(2);
  const int64_t n = int64_t(1) << 22;  // large enough for parallel_ranges' two threads
  std::vector<float> a(size_t(n), 1.0f), b(size_t(n), 2.0f), c(size_t(n), 0.0f);
  vadd(a.data(), b.data(), c.data(), n);
  const int64_t m = 512;
  std::vector<float> x(size_t(m * m), 0.5f), y(size_t(m * m), 0.25f), z(size_t(m * m), 0.0f);
  gemm(false, false, m, m, m, 1.0f, x.data(), m, y.data(), m, 0.0f, z.data(), m);
  vadd(a.data(), b.data(), c.data(), n);
  EXPECT_FLOAT_EQ(z[0], 0.125f * float(m));
  EXPECT_FLOAT_EQ(c[size_t(n) - 1], 3.0f);
  EXPECT_EQ(threads_of_this_process(), 2)
      << "main thread + one OpenMP worker expected; more means the BLAS runs a pool of its own";
  set_num_threads(1);
}

TEST(Threads, FlagWinsAndNamesWhatItOverrides) {
  ScopedEnv omp("OMP_NUM_THREADS", "1"), blas("OPENBLAS_NUM_THREADS", nullptr);
  ThreadChoice c = choose_threads(2, 1);
  EXPECT_EQ(c.threads, 2);
  EXPECT_EQ(c.source, "--threads");
  EXPECT_NE(c.note.find("OMP_NUM_THREADS=1 overridden"), std::string::npos) << c.note;
  c = choose_threads(1, 1);
  EXPECT_EQ(c.note, "") << "a setting that agrees is not overridden";
}

TEST(Threads, EnvironmentIsHonouredWithoutAFlag) {
  ScopedEnv omp("OMP_NUM_THREADS", "3,2"), blas("OPENBLAS_NUM_THREADS", nullptr);
  ThreadChoice c = choose_threads(0, 1);
  EXPECT_EQ(c.threads, 3);
  EXPECT_EQ(c.source, "OMP_NUM_THREADS");
  EXPECT_EQ(c.note, "");
  {
    ScopedEnv only_blas("OMP_NUM_THREADS", nullptr), b("OPENBLAS_NUM_THREADS", "5");
    c = choose_threads(0, 1);
    EXPECT_EQ(c.threads, 5);
    EXPECT_EQ(c.source, "OPENBLAS_NUM_THREADS");
  }
  // Both set and different: one pool, one count; the other is named.
  ScopedEnv b("OPENBLAS_NUM_THREADS", "1");
  c = choose_threads(0, 1);
  EXPECT_EQ(c.threads, 3);
  EXPECT_NE(c.note.find("OPENBLAS_NUM_THREADS=1 overridden"), std::string::npos) << c.note;
}

TEST(Threads, DefaultIsTheCoresPerRank) {
  ScopedEnv omp("OMP_NUM_THREADS", nullptr), blas("OPENBLAS_NUM_THREADS", nullptr);
  EXPECT_EQ(choose_threads(0, 1).threads, usable_cores());
  EXPECT_EQ(choose_threads(0, 1).source, "cores");
  EXPECT_EQ(choose_threads(0, usable_cores() + 5).threads, 1);
  EXPECT_EQ(cores_per_rank(2), std::max(1, usable_cores() / 2));
}

TEST(Threads, BadThreadVariableIsAnError) {
  ScopedEnv omp("OMP_NUM_THREADS", "lots");
  EXPECT_THROW(choose_threads(0, 1), Error);
  ScopedEnv zero("OMP_NUM_THREADS", "0");
  EXPECT_THROW(choose_threads(2, 1), Error);
}

// The tool as a user runs it: no flag and no thread environment gives
// every core to the one process, on the OpenMP build; a flag that differs
// from OMP_NUM_THREADS says so in one line.
TEST(Threads, BraidTrainRunsOnOneRuntimeWithTheDefaultCount) {
  const std::string dir = testing::temp_dir("threads");
  const std::string clean = "env -u OMP_NUM_THREADS -u OPENBLAS_NUM_THREADS -u LD_LIBRARY_PATH ";
  const std::string train = testing::braid_bin() + " train mlp --steps 3 --batch 32 --quiet";
  testing::CommandResult r = testing::run_command(clean + train + " --json-log " + dir + "/a.jsonl");
  ASSERT_EQ(r.status, 0) << r.out;
  nlohmann::json done;
  std::ifstream f(dir + "/a.jsonl");
  for (std::string line; std::getline(f, line);)
    if (!line.empty()) done = nlohmann::json::parse(line);
  ASSERT_EQ(done.value("event", ""), "done");
  EXPECT_EQ(done["blas_threading"], "openmp") << done.dump();
  EXPECT_EQ(done["threads"], usable_cores()) << done.dump();
  EXPECT_EQ(r.out.find("overridden"), std::string::npos) << r.out;

  r = testing::run_command(clean + "OMP_NUM_THREADS=1 " + train + " --threads 2");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("OMP_NUM_THREADS=1 overridden"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace braid
