// The cost-model probe (src/comm/setup/probe.cc): which links a new communicator
// probes, how raw figures become model parameters, and — with real
// processes — that a world communicator probes once, caches the result,
// and leaves alone figures taken while its ranks shared their cores.
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "braid/comm.h"
#include "braid/env.h"
#include "comm/setup/probe.h"
#include "support/multiproc.h"

using namespace braid;
using namespace braid::comm;
using braid::testing::expect_all_pass;
using braid::testing::make_comm;

namespace {

// Clears what the probe decision reads from the environment, and puts it
// back afterwards.
class ProbeEnv : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : {"BRAID_TUNING", "BRAID_PROBE"}) {
      if (auto x = env_str(v)) saved_.emplace_back(v, *x);
      ::unsetenv(v);
    }
  }
  void TearDown() override {
    ::unsetenv("BRAID_TUNING");
    ::unsetenv("BRAID_PROBE");
    for (auto& [k, v] : saved_) ::setenv(k.c_str(), v.c_str(), 1);
  }
  std::vector<std::pair<std::string, std::string>> saved_;
};

const std::vector<ProbeLink> kBoth = {{"shm", 1}, {"tcp", 4}};

TEST_F(ProbeEnv, PlanProbesTheTransportsTheCacheLacks) {
  EXPECT_EQ(format_plan(probe_plan("", kBoth, 8, 4, 4)), "shm:1,tcp:4");
  EXPECT_EQ(format_plan(probe_plan(R"({"shm":{"alpha_us":1}})", kBoth, 8, 4, 4)), "tcp:4");
  EXPECT_EQ(format_plan(probe_plan(R"({"shm":{},"tcp":{}})", kBoth, 8, 4, 4)), "");
  EXPECT_EQ(format_plan(probe_plan("", {{"shm", 1}}, 2, 2, 2)), "shm:1");
  // round trip through the store's text
  auto back = parse_plan("shm:1,tcp:4");
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[1].kind, "tcp");
  EXPECT_EQ(back[1].peer, 4);
}

TEST_F(ProbeEnv, NoPlanWhenTheFiguresWouldBeWrongOrAreChosen) {
  EXPECT_TRUE(probe_plan("", kBoth, 1, 1, 4).empty());  // one rank
  EXPECT_TRUE(probe_plan("", kBoth, 8, 4, 2).empty());  // more ranks than cores
  ::setenv("BRAID_PROBE", "0", 1);
  EXPECT_TRUE(probe_plan("", kBoth, 8, 4, 4).empty());
  ::unsetenv("BRAID_PROBE");
  ::setenv("BRAID_TUNING", "/nonexistent/tuning.json", 1);
  EXPECT_TRUE(probe_plan("", kBoth, 8, 4, 4).empty());
}

TEST(Probe, CalibrationScalesTheBuiltInFiguresByMachineOverReference) {
  const CostParams d;
  for (const char* kind : {"shm", "tcp"}) {
    const LinkCost& def = std::string(kind) == "tcp" ? d.tcp : d.shm;
    ProbeSample ref = reference_probe(kind);
    LinkCost same = calibrate_link(kind, ref);
    EXPECT_DOUBLE_EQ(same.alpha_s, def.alpha_s) << kind;
    EXPECT_DOUBLE_EQ(same.beta_s_per_b, def.beta_s_per_b) << kind;
    EXPECT_DOUBLE_EQ(calibrate_reduce_gbps(kind, ref), 1 / d.gamma_s_per_b / 1e9) << kind;
    ProbeSample fast = ref;
    fast.alpha_s /= 2;
    fast.gbps *= 2;
    fast.reduce_gbps *= 3;
    LinkCost f = calibrate_link(kind, fast);
    EXPECT_DOUBLE_EQ(f.alpha_s, def.alpha_s / 2) << kind;
    EXPECT_DOUBLE_EQ(f.beta_s_per_b, def.beta_s_per_b / 2) << kind;
    EXPECT_DOUBLE_EQ(calibrate_reduce_gbps(kind, fast), 3 / d.gamma_s_per_b / 1e9) << kind;
    // A wild figure moves the model by at most 4×.
    ProbeSample wild = ref;
    wild.alpha_s *= 100;
    wild.gbps /= 100;
    LinkCost w = calibrate_link(kind, wild);
    EXPECT_DOUBLE_EQ(w.alpha_s, def.alpha_s * 4) << kind;
    EXPECT_DOUBLE_EQ(w.beta_s_per_b, def.beta_s_per_b * 4) << kind;
  }
}

TEST(Probe, MergedFileParsesToTheCalibratedFiguresAndKeepsOtherEntries) {
  ProbeSample s = reference_probe("shm");
  s.gbps *= 2;
  const std::string text =
      merge_probe(R"({"tcp":{"alpha_us":33,"gbps":1.5}})", "shm", s, "hostx");
  const CostParams p = parse_cost_params(text, "merged");
  EXPECT_DOUBLE_EQ(p.shm.beta_s_per_b, CostParams{}.shm.beta_s_per_b / 2);
  EXPECT_DOUBLE_EQ(p.tcp.alpha_s, 33e-6);
  auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j["probed"]["shm"]["host"], "hostx");
  EXPECT_DOUBLE_EQ(j["probed"]["shm"]["gbps"].get<double>(), s.gbps);
  // Text that does not parse is replaced, not kept: the result holds this
  // probe's figures and nothing else.
  const std::string fresh = merge_probe("{oops", "shm", s, "h");
  const CostParams q = parse_cost_params(fresh, "merged");
  EXPECT_DOUBLE_EQ(q.shm.beta_s_per_b, p.shm.beta_s_per_b);
  EXPECT_DOUBLE_EQ(q.shm.alpha_s, p.shm.alpha_s);
  EXPECT_DOUBLE_EQ(q.tcp.alpha_s, CostParams{}.tcp.alpha_s);  // the built-in figure
  auto f = nlohmann::json::parse(fresh);
  EXPECT_EQ(f["probed"]["shm"]["host"], "h");
  EXPECT_FALSE(f.contains("tcp")) << fresh;
  EXPECT_EQ(f.size(), 3u) << fresh;  // shm, reduce_gbps, probed
}

// The link between hosts is its own class: a file without it prices it as
// its "tcp" (as files from before the class did); a probe of it sets it
// alone, calibrated against TCP's reference, and leaves "tcp" as it was.
TEST(Probe, TheNetClassFallsBackToTcpUntilItIsProbed) {
  const CostParams old = parse_cost_params(R"({"tcp":{"alpha_us":33,"gbps":1.5}})", "old");
  EXPECT_DOUBLE_EQ(old.net.alpha_s, 33e-6);
  EXPECT_DOUBLE_EQ(old.net.beta_s_per_b, old.tcp.beta_s_per_b);
  ProbeSample s = reference_probe("net");
  s.gbps /= 2;
  const std::string text = merge_probe(R"({"tcp":{"alpha_us":33,"gbps":1.5}})", "net", s, "node0");
  const CostParams p = parse_cost_params(text, "merged");
  EXPECT_DOUBLE_EQ(p.tcp.alpha_s, 33e-6);
  EXPECT_DOUBLE_EQ(p.net.alpha_s, CostParams{}.net.alpha_s);
  EXPECT_DOUBLE_EQ(p.net.beta_s_per_b, CostParams{}.net.beta_s_per_b * 2);
  EXPECT_EQ(nlohmann::json::parse(text)["probed"]["net"]["host"], "node0");
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

bool exists(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0;
}

// A 2-rank job meeting in a cache directory of its own, checking that the
// communicator works and agrees on its choices. `before` runs in each rank
// before the communicator is made, `after` once it has been used.
void job(const std::string& cache, const std::function<void(int)>& before = {},
         const std::function<void(int, Communicator&)>& after = {}) {
  expect_all_pass(2, [&](int rank, int size, std::shared_ptr<Store> store) {
    ::unsetenv("BRAID_TUNING");
    ::unsetenv("BRAID_PROBE");
    ::setenv("XDG_CACHE_HOME", cache.c_str(), 1);
    if (before) before(rank);
    auto c = make_comm(rank, size, store);
    std::vector<float> v(1 << 16, float(rank + 1));
    c->all_reduce(v.data(), v.data(), v.size(), DType::kF32, ReduceOp::kSum);
    EXPECT_EQ(v[12345], 3.0f);
    int32_t mine = int32_t(std::hash<std::string>{}(c->chosen_algorithm("all_reduce", 1 << 20)) &
                           0x7fffffff);
    int32_t all[2] = {0, 0};
    c->all_gather(&mine, all, 1, DType::kI32);
    EXPECT_EQ(all[0], all[1]) << "ranks choose different algorithms after the probe";
    // The probe's messages do not use up the pair's sequence numbers.
    int32_t x = 7;
    if (rank == 0) c->send(&x, 1, DType::kI32, 1);
    else c->recv(&x, 1, DType::kI32, 0);
    EXPECT_TRUE(std::regex_search(c->flight_record(), std::regex("seq 1 +send/recv")))
        << c->flight_record();
    if (after) after(rank, *c);
  });
}

// Whether this communicator's flight recorder holds probe messages (the
// probe's ~1400 fill it, and the job above adds only three operations).
bool probed(Communicator& c) {
  return std::regex_search(c.flight_record(), std::regex("seq [0-9]+ +probe "));
}

// job()'s `after`: rank 0 sent no probe messages.
void no_probe(int rank, Communicator& c) {
  if (rank == 0) {
    EXPECT_FALSE(probed(c)) << c.flight_record();
  }
}

// Pins the calling process to the nth core it may use, counting round (not
// core number n: a cpuset may leave cores 0 and 1 out).
void pin_to_nth_core(int nth) {
  cpu_set_t allowed, set;
  ASSERT_EQ(::sched_getaffinity(0, sizeof allowed, &allowed), 0);
  const int count = CPU_COUNT(&allowed);
  ASSERT_GT(count, 0);
  int cpu = -1;
  for (int c = 0, seen = 0; c < CPU_SETSIZE && cpu < 0; ++c)
    if (CPU_ISSET(c, &allowed) && seen++ == nth % count) cpu = c;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  ASSERT_EQ(::sched_setaffinity(0, sizeof set, &set), 0);
}

// With one core for both ranks the job measures no link at all: its
// figures would be the ranks' turns on the core.
TEST(ProbeJob, RanksOutnumberingTheirCoresDoNotProbe) {
  const std::string cache = braid::testing::temp_dir("probe_one_core");
  job(cache, [](int) { pin_to_nth_core(0); }, no_probe);
  EXPECT_FALSE(exists(cache + "/braid/tuning.json")) << slurp(cache + "/braid/tuning.json");
}

TEST(ProbeJob, AWorldCommunicatorProbesOnceAndCachesTheFigures) {
  const std::string cache = braid::testing::temp_dir("probe_cache");
  const std::string file = cache + "/braid/tuning.json";
  if (usable_cores() < 2) {
    // Two ranks on one core: no probe, no cache (as in the test above).
    job(cache, {}, no_probe);
    EXPECT_FALSE(exists(file)) << slurp(file);
    return;
  }
  // Each job probes until one whose ranks had a core each: beside the other
  // tests of a parallel ctest that may take a while.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  int jobs = 0;
  while (!exists(file) && std::chrono::steady_clock::now() < give_up) {
    job(cache);
    ++jobs;
    if (!exists(file)) std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  ASSERT_TRUE(exists(file)) << jobs << " jobs in 90 s each measured a core share below "
                            << kMinCoreShare << ", or none probed";
  const std::string first = slurp(file);
  auto j = nlohmann::json::parse(first);
  ASSERT_TRUE(j.contains("shm")) << first;
  EXPECT_GT(j["probed"]["shm"]["gbps"].get<double>(), 0) << first;
  EXPECT_GE(j["probed"]["shm"]["core_share"].get<double>(), kMinCoreShare) << first;
  // The next job reads the cache instead of probing again.
  job(cache, {}, no_probe);
  EXPECT_EQ(slurp(file), first);
  // Figures a person wrote are not probed over either.
  const std::string mine = R"({"shm":{"alpha_us":3,"gbps":4}})";
  std::ofstream(file) << mine;
  job(cache);
  EXPECT_EQ(slurp(file), mine);
}

TEST(ProbeJob, FiguresTakenWhileSharingACoreAreNotCached) {
  const std::string cache = braid::testing::temp_dir("probe_busy");
  // Rank r runs on a core of its own beside a busy thread on that core, so
  // each rank has about half a core while it probes, yet the host still
  // has a core per rank, so the probe runs. (With one core, both ranks
  // share it and the job does not probe.)
  const bool own_cores = usable_cores() >= 2;
  job(
      cache,
      [](int rank) {
        pin_to_nth_core(rank);
        // Inherits the mask; spins until the rank's process exits. The rank
        // goes on once it has run.
        static std::atomic<bool> running{false};
        std::thread([] {
          static volatile uint64_t spins = 0;
          running.store(true);
          for (;;) spins = spins + 1;
        }).detach();
        while (!running.load()) std::this_thread::yield();
      },
      [own_cores](int rank, Communicator& c) {
        if (rank == 0) {
          EXPECT_EQ(probed(c), own_cores) << c.flight_record();
        }
      });
  EXPECT_FALSE(exists(cache + "/braid/tuning.json")) << slurp(cache + "/braid/tuning.json");
}

}  // namespace
