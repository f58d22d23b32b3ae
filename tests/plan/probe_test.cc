// The planner's GEMM probe (braid/plan_probe.h): it measures a positive,
// size-ordered rate curve on this machine; the tuning file keeps it beside
// the links' entries; the this-machine preset then prices GEMMs by it
// (each size's efficiency is its measured rate over the device's peak),
// and without it keeps the generic curve; a malformed entry is refused by
// name. The same for the memory probe behind the simulator's copies.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>

#include "braid/error.h"
#include "braid/plan_cluster.h"
#include "braid/plan_probe.h"
#include "support/multiproc.h"

using namespace braid;

namespace {

// BRAID_TUNING set to `path` for the life of the object.
struct TuningFile {
  explicit TuningFile(const std::string& path) {
    if (const char* v = std::getenv("BRAID_TUNING")) saved = v, had = true;
    ::setenv("BRAID_TUNING", path.c_str(), 1);
  }
  ~TuningFile() {
    if (had) ::setenv("BRAID_TUNING", saved.c_str(), 1);
    else ::unsetenv("BRAID_TUNING");
  }
  std::string saved;
  bool had = false;
};

TEST(PlanProbe, MeasuresGemmsAndThisMachinePricesByThem) {
  const std::vector<plan::GemmSample> g = plan::probe_gemm();
  ASSERT_EQ(g.size(), 6u);  // 32 … 1024
  for (size_t i = 0; i < g.size(); ++i) {
    EXPECT_GT(g[i].flop_s, 1e8) << i;  // any core does 0.1 GFLOP/s
    if (i) {
      EXPECT_GT(g[i].flops, g[i - 1].flops);
    }
  }
  const std::string dir = braid::testing::temp_dir("plan_probe");
  const std::string links = R"({"shm": {"alpha_us": 1.5, "gbps": 8}})";
  const std::string text = plan::merge_gemm_probe(links, g);
  std::ofstream(dir + "/tuning.json") << text;
  TuningFile tf(dir + "/tuning.json");
  // The links' entries stay; the samples read back as written.
  EXPECT_NE(text.find("\"shm\""), std::string::npos);
  const auto back = plan::gemm_probe_from(text, "t");
  ASSERT_EQ(back.size(), g.size());
  const plan::Cluster c = plan::cluster_preset("this-machine");
  const double peak = c.device.peak("f32");
  for (size_t i = 0; i < g.size(); ++i) {
    EXPECT_NEAR(back[i].flop_s, g[i].flop_s, g[i].flop_s * 1e-9);
    EXPECT_NEAR(c.device.efficiency(g[i].flops), g[i].flop_s / peak, 1e-9) << i;
    EXPECT_LE(c.device.efficiency(g[i].flops), 1.0);
  }
  EXPECT_NE(c.device.source.find("measured by `braid bench --probe`"), std::string::npos);
}

TEST(PlanProbe, WithoutSamplesTheCurveIsGenericAndBadOnesAreRefused) {
  const std::string dir = braid::testing::temp_dir("plan_probe_none");
  std::ofstream(dir + "/tuning.json") << R"({"shm": {"alpha_us": 1.5, "gbps": 8}})";
  {
    TuningFile tf(dir + "/tuning.json");
    EXPECT_NE(plan::cluster_preset("this-machine").device.source.find("GEMM curve generic"),
              std::string::npos);
  }
  try {
    plan::gemm_probe_from(R"({"gemm_f32_1thread": [[1e6, -2]]})", "t.json");
    ADD_FAILURE() << "a negative rate was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("t.json: gemm_f32_1thread"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(plan::gemm_probe_from(R"({"gemm_f32_1thread": [["x"]]})", "t.json"), Error);
  EXPECT_TRUE(plan::gemm_probe_from("", "t.json").empty());
}

// Where the tuning cache has no GEMM curve, `braid plan`'s first use
// measures one and keeps it (when the probe had its core), and
// `this-machine` then prices by it; BRAID_PROBE=0 (and a user's own
// BRAID_TUNING) keep the generic curve and write nothing.
TEST(PlanProbe, AMissingGemmCurveIsMeasuredAndKept) {
  ::unsetenv("BRAID_TUNING");
  const std::string dir = braid::testing::temp_dir("plan_probe_first");
  ::setenv("XDG_CACHE_HOME", dir.c_str(), 1);
  const std::string cache = dir + "/braid/tuning.json";
  ::setenv("BRAID_PROBE", "0", 1);
  EXPECT_EQ(plan::keep_device_probe_if_missing(), "");
  EXPECT_FALSE(std::ifstream(cache).good());
  EXPECT_NE(plan::cluster_preset("this-machine").device.source.find("GEMM curve generic"),
            std::string::npos);
  ::unsetenv("BRAID_PROBE");
  const std::string did = plan::keep_device_probe_if_missing();
  EXPECT_EQ(did.rfind("measured one core's GEMM rate", 0), 0u) << did;
  if (did.find("not kept") != std::string::npos) {
    std::printf("%s\n", did.c_str());  // the probe shared its core: nothing to read back
    EXPECT_FALSE(std::ifstream(cache).good());
    return;
  }
  std::ifstream kept(cache);
  ASSERT_TRUE(kept.good()) << did;
  std::stringstream text;
  text << kept.rdbuf();
  EXPECT_EQ(plan::gemm_probe_from(text.str(), cache).size(), 6u);
  EXPECT_TRUE(plan::elementwise_probe_from(text.str(), cache).has_value());
  EXPECT_NE(plan::cluster_preset("this-machine").device.source.find("first use"),
            std::string::npos);
  // Kept once: the next call has nothing to do.
  EXPECT_EQ(plan::keep_device_probe_if_missing(), "");
}

// The element-wise probe: braid's own kernels at positive rates on one
// core; kept in the tuning file beside the links, read back as written,
// and this-machine prices those passes by them; a malformed entry is
// refused by name.
TEST(PlanProbe, ElementwisePassesAreMeasuredKeptAndPricedBy) {
  const plan::ElementwiseSample e = plan::probe_elementwise();
  for (double r : {e.norm_gbps, e.gelu_gbps, e.softmax_gbps, e.optimizer_gbps})
    EXPECT_GT(r, 0.1);  // any core streams 0.1 GB/s
  EXPECT_GT(e.core_share, 0);
  EXPECT_LE(e.core_share, 1.0 + 1e-9);
  const std::string text =
      plan::merge_elementwise_probe(R"({"shm": {"alpha_us": 1.5, "gbps": 8}})", e);
  EXPECT_NE(text.find("\"shm\""), std::string::npos);
  const auto back = plan::elementwise_probe_from(text, "t.json");
  ASSERT_TRUE(back.has_value());
  EXPECT_DOUBLE_EQ(back->gelu_gbps, e.gelu_gbps);
  EXPECT_DOUBLE_EQ(back->optimizer_gbps, e.optimizer_gbps);
  const std::string dir = braid::testing::temp_dir("plan_probe_elementwise");
  std::ofstream(dir + "/tuning.json") << text;
  {
    TuningFile tf(dir + "/tuning.json");
    const plan::Device d = plan::cluster_preset("this-machine").device;
    EXPECT_DOUBLE_EQ(d.pass_rate(&plan::Device::PassRates::norm), e.norm_gbps * 1e9);
    EXPECT_DOUBLE_EQ(d.pass_rate(&plan::Device::PassRates::softmax), e.softmax_gbps * 1e9);
    EXPECT_NE(d.source.find("elementwise_f32_1thread"), std::string::npos);
  }
  EXPECT_FALSE(plan::elementwise_probe_from(R"({"shm": {}})", "t.json").has_value());
  try {
    plan::elementwise_probe_from(R"({"elementwise_f32_1thread": {"norm_gbps": 1, "gelu_gbps": 0,
        "softmax_gbps": 1, "optimizer_gbps": 1}})",
                                 "t.json");
    ADD_FAILURE() << "a zero rate was accepted";
  } catch (const Error& x) {
    EXPECT_NE(std::string(x.what()).find("t.json: elementwise_f32_1thread.gelu_gbps"),
              std::string::npos)
        << x.what();
  }
}

// The memory probe over a real pair of blocking endpoints (a socket pair,
// one thread a side, as the two ranks of `braid bench --probe` over shared
// memory): positive rates at the working sets it names, the cache from
// sysfs. Kept in the tuning file, this-machine's simulator reads it back;
// a malformed entry is refused by name.
TEST(PlanProbe, MemoryIsMeasuredKeptAndReadBack) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  auto endpoint = [](int fd) {
    auto send = [fd](const void* b, size_t n) {
      for (size_t off = 0; off < n;) {
        const ssize_t k = ::write(fd, static_cast<const char*>(b) + off, n - off);
        if (k <= 0) throw std::runtime_error("write");
        off += size_t(k);
      }
    };
    auto recv = [fd](void* b, size_t n) {
      for (size_t off = 0; off < n;) {
        const ssize_t k = ::read(fd, static_cast<char*>(b) + off, n - off);
        if (k <= 0) throw std::runtime_error("read");
        off += size_t(k);
      }
    };
    return std::make_pair(std::function<void(const void*, size_t)>(send),
                          std::function<void(void*, size_t)>(recv));
  };
  auto [s1, r1] = endpoint(sv[1]);
  std::thread other([&] { plan::probe_memory(false, s1, r1); });
  auto [s0, r0] = endpoint(sv[0]);
  const plan::MemorySample m = plan::probe_memory(true, s0, r0);
  other.join();
  ::close(sv[0]);
  ::close(sv[1]);
  EXPECT_GT(m.cached_gbps, 0);
  EXPECT_GT(m.beyond_gbps, 0);
  EXPECT_GT(m.reduce_gbps, 0);
  EXPECT_GT(m.core_share, 0);
  EXPECT_LE(m.core_share, 1.0 + 1e-9);
  EXPECT_EQ(m.beyond_ws_bytes, double(128 << 20));
  EXPECT_EQ(m.llc_bytes, plan::last_level_cache_bytes());
  if (!(m.llc_bytes > 0)) {  // no cache size in sysfs: nothing is kept
    EXPECT_EQ(plan::merge_memory_probe("{}", m).find("shm_memory"), std::string::npos);
    return;
  }
  const std::string text = plan::merge_memory_probe(R"({"shm": {"alpha_us": 1.5, "gbps": 8}})", m);
  const auto back = plan::memory_probe_from(text, "t.json");
  ASSERT_TRUE(back.has_value());
  EXPECT_DOUBLE_EQ(back->cached_gbps, m.cached_gbps);
  EXPECT_DOUBLE_EQ(back->llc_bytes, m.llc_bytes);
  EXPECT_NE(text.find("\"shm\""), std::string::npos);  // the links' entry is kept
  const std::string dir = braid::testing::temp_dir("plan_probe_memory");
  std::ofstream(dir + "/tuning.json") << text;
  {
    TuningFile tf(dir + "/tuning.json");
    const plan::Cluster c = plan::cluster_preset("this-machine");
    ASSERT_TRUE(c.memory.modelled());
    EXPECT_DOUBLE_EQ(c.memory.copy_s_per_b(1 << 20), 1 / (m.cached_gbps * 1e9));
    EXPECT_DOUBLE_EQ(c.memory.llc_bytes, m.llc_bytes);
  }
  EXPECT_FALSE(plan::memory_probe_from(R"({"shm": {}})", "t.json").has_value());
  try {
    plan::memory_probe_from(R"({"shm_memory": {"cached_gbps": -1, "beyond_gbps": 1,
        "beyond_ws_bytes": 1, "reduce_gbps": 1, "llc_bytes": 1}})", "t.json");
    ADD_FAILURE() << "a negative rate was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("t.json: shm_memory.cached_gbps"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(plan::memory_probe_from(R"({"shm_memory": {"cached_gbps": 1}})", "t.json"), Error);
}

}  // namespace
