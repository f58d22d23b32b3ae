// Cluster files and presets: every preset parses back from its own JSON,
// a bad file's error names the field, the efficiency curve interpolates,
// and the seeds' worked example holds on the catalogue's InfiniBand HDR.
#include <gtest/gtest.h>

#include <cstdlib>

#include <nlohmann/json.hpp>

#include "braid/error.h"
#include "braid/plan_cluster.h"

namespace {

using namespace braid;

std::string error_of(const std::string& text) {
  try {
    plan::parse_cluster(text, "c.json");
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kInvalidArgument);
    return e.what();
  }
  return "no error";
}

// The error of the cluster file `j` once `edit` has changed it.
template <class Edit>
std::string error_of_edited(nlohmann::json j, const Edit& edit) {
  edit(j);
  return error_of(j.dump());
}

TEST(PlanCluster, PresetsRoundTripThroughTheFileSchema) {
  for (const std::string& name : plan::preset_names()) {
    const plan::Cluster c = plan::cluster_preset(name);
    const plan::Cluster back = plan::parse_cluster(plan::cluster_json(c), name);
    EXPECT_EQ(back.devices_per_host, c.devices_per_host) << name;
    EXPECT_EQ(back.device.peak_flops.size(), c.device.peak_flops.size()) << name;
    EXPECT_NEAR(back.device.memory_bytes, c.device.memory_bytes, 1) << name;
    EXPECT_NEAR(back.inter_host.cost.beta_s_per_b / c.inter_host.cost.beta_s_per_b, 1, 1e-12) << name;
    EXPECT_EQ(back.intra_host.shared_memory, c.intra_host.shared_memory) << name;
    EXPECT_FALSE(c.device.source.empty()) << name;
    EXPECT_FALSE(c.intra_host.source.empty()) << name;
  }
  const plan::Cluster h = plan::cluster_preset("dgx-h100");
  EXPECT_DOUBLE_EQ(h.device.peak("bf16"), 989.4e12);
  EXPECT_EQ(h.intra_host.name, "nvswitch-h100");
  EXPECT_EQ(h.inter_host.name, "ib-ndr");
}

TEST(PlanCluster, BadFilesNameTheField) {
  nlohmann::json j = nlohmann::json::parse(plan::cluster_json(plan::cluster_preset("dgx-a100")));
  auto with = [&](auto edit) { return error_of_edited(j, edit); };
  EXPECT_NE(with([](auto& k) { k["device"].erase("memory_gib"); }).find("c.json: device.memory_gib: missing"),
            std::string::npos);
  EXPECT_NE(with([](auto& k) { k["device"]["memory_gib"] = -1; }).find("device.memory_gib: must be a number > 0"),
            std::string::npos);
  EXPECT_NE(with([](auto& k) { k["intra_host"] = "nvlink9"; }).find("intra_host: unknown link class 'nvlink9'"),
            std::string::npos);
  EXPECT_NE(with([](auto& k) { k["inter_host"] = {{"alpha_us", 5}}; }).find("inter_host.gbytes_per_s: missing"),
            std::string::npos);
  EXPECT_NE(with([](auto& k) { k["devices_per_hosts"] = 8; }).find("devices_per_hosts: unknown field"),
            std::string::npos);
  EXPECT_NE(with([](auto& k) { k["devices_per_host"] = 2.5; }).find("devices_per_host: must be a whole number"),
            std::string::npos);
  EXPECT_NE(with([](auto& k) { k["device"]["gemm_efficiency"] = {{1e9, 0.5}, {1e8, 0.6}}; })
                .find("device.gemm_efficiency[1]: gemm_flops must be > 0 and ascending"),
            std::string::npos);
  EXPECT_NE(with([](auto& k) { k["device"]["dtype"] = "fp8"; }).find("device.dtype"), std::string::npos);
  EXPECT_NE(with([](auto& k) { k["spine_oversubscription"] = 0.5; }).find("spine_oversubscription"),
            std::string::npos);
  EXPECT_NE(error_of("{not json").find("c.json: not JSON"), std::string::npos);
  EXPECT_THROW(plan::load_cluster("/nonexistent/cluster.json"), Error);
  // This machine's links are read from the tuning file only when named.
  const char* was = std::getenv("BRAID_TUNING");
  const std::string saved = was ? was : "";
  ::setenv("BRAID_TUNING", "/nonexistent/tuning.json", 1);
  EXPECT_NO_THROW(plan::cluster_preset("dgx-h100"));
  EXPECT_THROW(plan::link_class("shm"), Error);
  if (was) ::setenv("BRAID_TUNING", saved.c_str(), 1);
  else ::unsetenv("BRAID_TUNING");
}

TEST(PlanCluster, EfficiencyIsLogLinearBetweenPointsAndFlatBeyond) {
  plan::Device d;
  d.gemm_efficiency = {{1e6, 0.1}, {1e8, 0.5}};
  EXPECT_DOUBLE_EQ(d.efficiency(1e3), 0.1);
  EXPECT_DOUBLE_EQ(d.efficiency(1e9), 0.5);
  EXPECT_NEAR(d.efficiency(1e7), 0.3, 1e-12);
}

TEST(PlanCluster, OneTerabyteOver200GbpsTakesAtLeast40Seconds) {
  const plan::LinkClass hdr = plan::link_class("ib-hdr");
  EXPECT_NEAR(1e12 * hdr.cost.beta_s_per_b, 40, 1e-9);
  comm::GroupLinks g;
  g.ranks = 2;
  g.hosts = 2;
  g.inner = plan::link_class("nvswitch-a100").cost;
  g.outer = hdr.cost;
  const comm::CollectivePrice p = comm::price_collective("send", size_t(1e12), g);
  EXPECT_GE(p.seconds, 40.0);
  EXPECT_LT(p.seconds, 40.001);
}

}  // namespace

TEST(PlanCluster, HostMemoryPricesCopiesByTheirWorkingSet) {
  // 32 MiB cache; copies at 20 GB/s cached and 12.5 GB/s with 128 MiB of
  // buffers (a quarter in the cache); reductions at 60 GB/s cached.
  plan::HostMemory m;
  EXPECT_FALSE(m.modelled());
  EXPECT_EQ(m.beyond_share(1e12), 0);
  m.llc_bytes = 32 << 20;
  m.copy_cached_s_per_b = 1 / 20e9;
  m.copy_beyond_s_per_b = 1 / 12.5e9;
  m.beyond_ws_bytes = 128 << 20;
  m.reduce_cached_s_per_b = 1 / 60e9;
  ASSERT_TRUE(m.modelled());
  // Within the cache: the cached rates.
  EXPECT_DOUBLE_EQ(m.copy_s_per_b(4 << 20), 1 / 20e9);
  EXPECT_DOUBLE_EQ(m.reduce_s_per_b(32 << 20), 1 / 60e9);
  // At the measurement's own working set: its rate.
  EXPECT_NEAR(m.copy_s_per_b(128 << 20) * 12.5e9, 1, 1e-12);
  // Half beyond the cache (64 MiB): a copy through a slot and a
  // reduction in place (one buffer of the user's each) pay half of the
  // extra, a local copy (two) all of it.
  const double extra = (1 / 12.5e9 - 1 / 20e9) / 0.75;
  EXPECT_NEAR(m.copy_s_per_b(64 << 20), 1 / 20e9 + 0.5 * extra, 1e-20);
  EXPECT_NEAR(m.reduce_s_per_b(64 << 20), 1 / 60e9 + 0.5 * extra, 1e-20);
  EXPECT_NEAR(m.local_copy_s_per_b(64 << 20), 1 / 60e9 + extra, 1e-20);
  EXPECT_DOUBLE_EQ(m.local_copy_s_per_b(32 << 20), 1 / 60e9);
  // Through the file schema and back; bad figures named.
  plan::Cluster c = plan::cluster_preset("eth-cpu");
  c.memory = m;
  const plan::Cluster back = plan::parse_cluster(plan::cluster_json(c), "c.json");
  EXPECT_NEAR(back.memory.copy_s_per_b(64 << 20) / m.copy_s_per_b(64 << 20), 1, 1e-12);
  EXPECT_NEAR(back.memory.reduce_s_per_b(256 << 20) / m.reduce_s_per_b(256 << 20), 1, 1e-12);
  nlohmann::json j = nlohmann::json::parse(plan::cluster_json(c));
  auto bad = [&](auto edit) { return error_of_edited(j, edit); };
  EXPECT_NE(bad([](auto& k) { k["host_memory"].erase("llc_mib"); }).find("host_memory.llc_mib: missing"),
            std::string::npos);
  EXPECT_NE(bad([](auto& k) { k["host_memory"]["beyond_working_set_mib"] = 16; })
                .find("host_memory.beyond_working_set_mib: must be larger than llc_mib"),
            std::string::npos);
  EXPECT_NE(bad([](auto& k) { k["host_memory"]["copy_gbytes_per_s_beyond"] = 40; })
                .find("host_memory.copy_gbytes_per_s_beyond: must be at most"),
            std::string::npos);
  EXPECT_NE(bad([](auto& k) { k["host_memory"]["l3"] = 1; }).find("host_memory.l3: unknown field"),
            std::string::npos);
}

// A device's measured element-wise rates go through the file schema and
// back (a pass not given stays unset: it runs at the memory bandwidth);
// a bad rate and an unknown pass are named.
TEST(PlanCluster, ElementwiseRatesRoundTripAndBadOnesAreNamed) {
  plan::Cluster c = plan::cluster_preset("eth-cpu");
  const double bw = c.device.memory_bw;
  c.device.pass_bw = {bw, bw, 0, bw / 2};
  const plan::Cluster back = plan::parse_cluster(plan::cluster_json(c), "c.json");
  EXPECT_DOUBLE_EQ(back.device.pass_bw.optimizer, bw / 2);
  EXPECT_DOUBLE_EQ(back.device.pass_bw.gelu, bw);
  EXPECT_EQ(back.device.pass_bw.softmax, 0);
  EXPECT_DOUBLE_EQ(back.device.pass_rate(&plan::Device::PassRates::softmax), bw);
  const nlohmann::json j = nlohmann::json::parse(plan::cluster_json(c));
  EXPECT_NE(error_of_edited(j, [](auto& k) { k["device"]["elementwise_gbytes_per_s"]["softmax"] = -1; })
                .find("device.elementwise_gbytes_per_s.softmax"),
            std::string::npos);
  EXPECT_NE(error_of_edited(j, [](auto& k) { k["device"]["elementwise_gbytes_per_s"]["relu"] = 1; })
                .find("device.elementwise_gbytes_per_s.relu: unknown field"),
            std::string::npos);
  EXPECT_NE(error_of_edited(j, [](auto& k) { k["device"]["elementwise_gbytes_per_s"] = 3; })
                .find("device.elementwise_gbytes_per_s: must be an object"),
            std::string::npos);
}
