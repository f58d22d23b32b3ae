// The GEMM probe behind `this-machine` (braid/plan_probe.h): one core's f32
// rate by size, measured with braid's own kernel and kept in the tuning
// file.
#include "braid/plan_probe.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "braid/env.h"
#include "braid/error.h"
#include "braid/kernels.h"
#include "braid/tuning.h"
#include "plan/probe/best_rate.h"
#include "plan/probe/tuning_json.h"

namespace braid::plan {
std::vector<GemmSample> probe_gemm(double* core_share) {
  const CoreShare share;
  const int threads = num_threads();
  set_num_threads(1);
  std::vector<GemmSample> out;
  for (int64_t n = 32; n <= 1024; n *= 2) {
    std::vector<float> a(size_t(n * n), 0.5f), b(size_t(n * n), 0.25f), c(size_t(n * n));
    const double flops = 2.0 * double(n) * double(n) * double(n);
    const double best = flops * best_rate(2e-3, [&] {
      gemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    });
    out.push_back({flops, best});
  }
  set_num_threads(threads);
  if (core_share != nullptr) *core_share = share.get();
  return out;
}

std::string keep_device_probe_if_missing() {
  if (!comm::may_probe()) return "";
  const std::string text = comm::read_tuning();
  if (!gemm_probe_from(text, "tuning file").empty() && elementwise_probe_from(text, "tuning file"))
    return "";
  const std::string path = comm::default_tuning_path();
  if (path.empty()) return "";
  double share = 0;
  const std::vector<GemmSample> g = probe_gemm(&share);
  const ElementwiseSample e = probe_elementwise();
  share = std::min(share, e.core_share);
  char rate[192];
  std::snprintf(rate, sizeof rate,
                "one core's GEMM rate, %.0f-%.0f GFLOP/s (32-1024 square), and its element-wise "
                "passes, %.0f-%.0f GB/s",
                g.front().flop_s / 1e9, g.back().flop_s / 1e9,
                std::min({e.norm_gbps, e.gelu_gbps, e.softmax_gbps, e.optimizer_gbps}),
                std::max({e.norm_gbps, e.gelu_gbps, e.softmax_gbps, e.optimizer_gbps}));
  if (share < comm::kMinCoreShare)
    return std::string("measured ") + rate + " with " + std::to_string(share) +
           " of a core (other work is running): not kept; the generic curve and the assumed "
           "memory bandwidth are used";
  comm::write_tuning(path, merge_elementwise_probe(merge_gemm_probe(text, g), e));
  return std::string("measured ") + rate + " -> " + path;
}

std::string merge_gemm_probe(const std::string& text, const std::vector<GemmSample>& samples) {
  nlohmann::json j = tuning_json(text);
  nlohmann::json rows = nlohmann::json::array();
  for (const GemmSample& s : samples) rows.push_back({s.flops, s.flop_s / 1e9});
  j["gemm_f32_1thread"] = rows;
  return j.dump(2) + "\n";
}

std::vector<GemmSample> gemm_probe_from(const std::string& text, const std::string& from) {
  std::vector<GemmSample> out;
  if (text.empty()) return out;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    if (!j.is_object() || !j.contains("gemm_f32_1thread")) return out;
    for (const auto& row : j.at("gemm_f32_1thread")) {
      const double flops = row.at(0).get<double>(), gflops = row.at(1).get<double>();
      if (!(flops > 0) || !(gflops > 0))
        throw Error(Errc::kInvalidArgument,
                    from + ": gemm_f32_1thread: entries must be [flops > 0, GFLOP/s > 0]");
      out.push_back({flops, gflops * 1e9});
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(Errc::kInvalidArgument, from + ": gemm_f32_1thread: " + e.what());
  }
  std::sort(out.begin(), out.end(),
            [](const GemmSample& a, const GemmSample& b) { return a.flops < b.flops; });
  return out;
}

}  // namespace braid::plan
