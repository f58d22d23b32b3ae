// Cluster files: parsing, validation, writing back. Every field is checked
// by name, and an unknown key is refused, so a typo is an error that names
// it rather than a default silently used.
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "braid/error.h"
#include "braid/plan_cluster.h"

namespace braid::plan {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& from, const std::string& field, const std::string& why) {
  throw Error(Errc::kInvalidArgument, from + ": " + field + ": " + why);
}

void only_keys(const json& o, const std::set<std::string>& allowed, const std::string& from,
               const std::string& where) {
  for (auto it = o.begin(); it != o.end(); ++it)
    if (!allowed.count(it.key())) {
      std::string list;
      for (const std::string& k : allowed) list += (list.empty() ? "" : ", ") + k;
      bad(from, where + it.key(), "unknown field (expected one of: " + list + ")");
    }
}

double positive(const json& o, const std::string& key, const std::string& from,
                const std::string& where) {
  if (!o.contains(key)) bad(from, where + key, "missing");
  const json& v = o[key];
  if (!v.is_number() || !(v.get<double>() > 0) || !std::isfinite(v.get<double>()))
    bad(from, where + key, "must be a number > 0");
  return v.get<double>();
}

int positive_int(const json& o, const std::string& key, const std::string& from) {
  const double v = positive(o, key, from, "");
  if (v != std::floor(v) || v > 1e9) bad(from, key, "must be a whole number >= 1");
  return int(v);
}

std::string text_or(const json& o, const std::string& key, const std::string& fallback,
                    const std::string& from, const std::string& where) {
  if (!o.contains(key)) return fallback;
  if (!o[key].is_string()) bad(from, where + key, "must be a string");
  return o[key].get<std::string>();
}

LinkClass parse_link(const json& j, const std::string& key, const std::string& from) {
  if (!j.contains(key)) bad(from, key, "missing (a link class name or an object)");
  const json& v = j[key];
  if (v.is_string()) {
    try {
      return link_class(v.get<std::string>());
    } catch (const Error& e) {
      bad(from, key, e.what());
    }
  }
  if (!v.is_object()) bad(from, key, "must be a link class name or an object");
  const std::string w = key + ".";
  only_keys(v, {"name", "alpha_us", "gbytes_per_s", "shared_memory", "source"}, from, w);
  LinkClass l;
  l.name = text_or(v, "name", key, from, w);
  l.cost.alpha_s = positive(v, "alpha_us", from, w) * 1e-6;
  l.cost.beta_s_per_b = 1.0 / (positive(v, "gbytes_per_s", from, w) * 1e9);
  if (v.contains("shared_memory")) {
    if (!v["shared_memory"].is_boolean()) bad(from, w + "shared_memory", "must be true or false");
    l.shared_memory = v["shared_memory"].get<bool>();
  }
  l.source = text_or(v, "source", "", from, w);
  return l;
}

Device parse_device(const json& j, const std::string& from) {
  if (!j.contains("device") || !j["device"].is_object()) bad(from, "device", "missing object");
  const json& d = j["device"];
  const std::string w = "device.";
  only_keys(d,
            {"name", "peak_tflops", "memory_gib", "memory_bw_gbytes_per_s", "dtype", "runtime",
             "cores", "gemm_efficiency", "elementwise_gbytes_per_s", "source"},
            from, w);
  Device dev;
  dev.name = text_or(d, "name", "device", from, w);
  if (!d.contains("peak_tflops") || !d["peak_tflops"].is_object() || d["peak_tflops"].empty())
    bad(from, w + "peak_tflops", "missing object of dtype: TFLOP/s");
  for (auto it = d["peak_tflops"].begin(); it != d["peak_tflops"].end(); ++it)
    dev.peak_flops[it.key()] = positive(d["peak_tflops"], it.key(), from, w + "peak_tflops.") * 1e12;
  dev.memory_bytes = positive(d, "memory_gib", from, w) * double(1ull << 30);
  dev.memory_bw = positive(d, "memory_bw_gbytes_per_s", from, w) * 1e9;
  dev.dtype = text_or(d, "dtype", "bf16", from, w);
  if (dev.dtype != "bf16" && dev.dtype != "f32") bad(from, w + "dtype", "must be \"bf16\" or \"f32\"");
  dev.peak(dev.dtype);  // the training dtype needs a peak
  const std::string runtime = text_or(d, "runtime", "megatron", from, w);
  if (runtime != "megatron" && runtime != "braid-cpu")
    bad(from, w + "runtime", "must be \"megatron\" or \"braid-cpu\"");
  dev.runtime = runtime == "megatron" ? Runtime::kMegatron : Runtime::kBraidCpu;
  if (d.contains("cores")) {
    const double v = positive(d, "cores", from, w);
    if (v != std::floor(v) || v > 1e9) bad(from, w + "cores", "must be a whole number >= 1");
    dev.cores = int(v);
  }
  if (!d.contains("gemm_efficiency") || !d["gemm_efficiency"].is_array() ||
      d["gemm_efficiency"].empty())
    bad(from, w + "gemm_efficiency", "missing list of [gemm_flops, efficiency] pairs");
  double last = 0;
  for (size_t i = 0; i < d["gemm_efficiency"].size(); ++i) {
    const json& p = d["gemm_efficiency"][i];
    const std::string at = w + "gemm_efficiency[" + std::to_string(i) + "]";
    if (!p.is_array() || p.size() != 2 || !p[0].is_number() || !p[1].is_number())
      bad(from, at, "must be [gemm_flops, efficiency]");
    const double f = p[0].get<double>(), e = p[1].get<double>();
    if (!(f > last)) bad(from, at, "gemm_flops must be > 0 and ascending");
    if (!(e > 0 && e <= 1)) bad(from, at, "efficiency must be in (0, 1]");
    dev.gemm_efficiency.push_back({f, e});
    last = f;
  }
  if (d.contains("elementwise_gbytes_per_s")) {
    const json& e = d["elementwise_gbytes_per_s"];
    const std::string at = w + "elementwise_gbytes_per_s";
    if (!e.is_object()) bad(from, at, "must be an object of pass: GB/s");
    only_keys(e, {"norm", "gelu", "softmax", "optimizer"}, from, at + ".");
    for (auto [key, rate] : {std::pair{"norm", &dev.pass_bw.norm},
                             {"gelu", &dev.pass_bw.gelu},
                             {"softmax", &dev.pass_bw.softmax},
                             {"optimizer", &dev.pass_bw.optimizer}})
      if (e.contains(key)) *rate = positive(e, key, from, at + ".") * 1e9;
  }
  dev.source = text_or(d, "source", "", from, w);
  return dev;
}

json link_json(const LinkClass& l) {
  return {{"name", l.name},
          {"alpha_us", l.cost.alpha_s * 1e6},
          {"gbytes_per_s", 1.0 / l.cost.beta_s_per_b / 1e9},
          {"shared_memory", l.shared_memory},
          {"source", l.source}};
}

HostMemory parse_memory(const json& j, const std::string& from) {
  const std::string w = "host_memory.";
  const json& m = j["host_memory"];
  if (!m.is_object()) bad(from, "host_memory", "must be an object");
  only_keys(m, {"llc_mib", "copy_gbytes_per_s_cached", "copy_gbytes_per_s_beyond",
                "beyond_working_set_mib", "reduce_gbytes_per_s_cached", "source"},
            from, w);
  HostMemory h;
  h.llc_bytes = positive(m, "llc_mib", from, w) * (1 << 20);
  h.copy_cached_s_per_b = 1.0 / (positive(m, "copy_gbytes_per_s_cached", from, w) * 1e9);
  h.copy_beyond_s_per_b = 1.0 / (positive(m, "copy_gbytes_per_s_beyond", from, w) * 1e9);
  h.beyond_ws_bytes = positive(m, "beyond_working_set_mib", from, w) * (1 << 20);
  h.reduce_cached_s_per_b = 1.0 / (positive(m, "reduce_gbytes_per_s_cached", from, w) * 1e9);
  if (!(h.beyond_ws_bytes > h.llc_bytes))
    bad(from, w + "beyond_working_set_mib", "must be larger than llc_mib");
  if (h.copy_beyond_s_per_b < h.copy_cached_s_per_b)
    bad(from, w + "copy_gbytes_per_s_beyond", "must be at most copy_gbytes_per_s_cached");
  h.source = text_or(m, "source", "", from, w);
  return h;
}

}  // namespace

double HostMemory::beyond_share(double ws) const {
  return modelled() && ws > llc_bytes ? 1.0 - llc_bytes / ws : 0.0;
}

// What a byte beyond the cache costs more than a cached one, from the
// beyond measurement (top comment in braid/plan_cluster.h), for a pass
// that touches `buffers` of the user's in a working set of `ws` bytes.
static double beyond_cost(const HostMemory& h, double ws, int buffers) {
  const double fb = h.beyond_share(h.beyond_ws_bytes);
  if (!(fb > 0)) return 0;
  const double extra = std::max(0.0, (h.copy_beyond_s_per_b - h.copy_cached_s_per_b) / fb);
  return buffers * h.beyond_share(ws) * extra;
}

double HostMemory::copy_s_per_b(double ws) const {
  return copy_cached_s_per_b + beyond_cost(*this, ws, 1);
}

double HostMemory::reduce_s_per_b(double ws) const {
  return reduce_cached_s_per_b + beyond_cost(*this, ws, 1);
}

double HostMemory::local_copy_s_per_b(double ws) const {
  return reduce_cached_s_per_b + beyond_cost(*this, ws, 2);
}

double Device::peak(const std::string& dtype) const {
  auto it = peak_flops.find(dtype);
  if (it == peak_flops.end())
    throw Error(Errc::kInvalidArgument,
                "device " + name + ": no peak_tflops for dtype '" + dtype + "'");
  return it->second;
}

double Device::efficiency(double flops) const {
  if (gemm_efficiency.empty()) return 1;
  if (flops <= gemm_efficiency.front().flops) return gemm_efficiency.front().efficiency;
  if (flops >= gemm_efficiency.back().flops) return gemm_efficiency.back().efficiency;
  size_t i = 1;
  while (gemm_efficiency[i].flops < flops) ++i;
  const EfficiencyPoint& a = gemm_efficiency[i - 1];
  const EfficiencyPoint& b = gemm_efficiency[i];
  const double t = std::log(flops / a.flops) / std::log(b.flops / a.flops);
  return a.efficiency + t * (b.efficiency - a.efficiency);
}

Cluster parse_cluster(const std::string& text, const std::string& from) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(Errc::kInvalidArgument, from + ": not JSON: " + e.what());
  }
  if (!j.is_object()) throw Error(Errc::kInvalidArgument, from + ": must be a JSON object");
  only_keys(j, {"name", "device", "devices_per_host", "hosts_per_rack", "spine_oversubscription",
                "intra_host", "inter_host", "nics_per_host", "reduce_gbytes_per_s",
                "cores_per_host", "host_memory"},
            from, "");
  Cluster c;
  c.name = text_or(j, "name", from, from, "");
  c.device = parse_device(j, from);
  c.devices_per_host = positive_int(j, "devices_per_host", from);
  c.hosts_per_rack = j.contains("hosts_per_rack") ? positive_int(j, "hosts_per_rack", from) : 1;
  c.spine_oversubscription =
      j.contains("spine_oversubscription") ? positive(j, "spine_oversubscription", from, "") : 1;
  if (c.spine_oversubscription < 1) bad(from, "spine_oversubscription", "must be >= 1 (1:1 or worse)");
  c.intra_host = parse_link(j, "intra_host", from);
  c.inter_host = parse_link(j, "inter_host", from);
  c.nics_per_host = j.contains("nics_per_host") ? positive_int(j, "nics_per_host", from) : 1;
  if (j.contains("reduce_gbytes_per_s"))
    c.gamma_s_per_b = 1.0 / (positive(j, "reduce_gbytes_per_s", from, "") * 1e9);
  if (j.contains("cores_per_host")) c.cores_per_host = positive_int(j, "cores_per_host", from);
  if (j.contains("host_memory")) c.memory = parse_memory(j, from);
  return c;
}

Cluster load_cluster(const std::string& preset_or_path) {
  for (const std::string& p : preset_names())
    if (p == preset_or_path) return cluster_preset(p);
  std::ifstream f(preset_or_path);
  if (!f) {
    std::string list;
    for (const std::string& p : preset_names()) list += (list.empty() ? "" : ", ") + p;
    throw Error(Errc::kIo, "cluster '" + preset_or_path +
                               "': neither a preset (" + list + ") nor a readable file");
  }
  std::ostringstream text;
  text << f.rdbuf();
  return parse_cluster(text.str(), preset_or_path);
}

std::string cluster_json(const Cluster& c) {
  json peaks = json::object();
  for (const auto& [k, v] : c.device.peak_flops) peaks[k] = v / 1e12;
  json curve = json::array();
  for (const EfficiencyPoint& p : c.device.gemm_efficiency) curve.push_back({p.flops, p.efficiency});
  json j{{"name", c.name},
         {"device",
          {{"name", c.device.name},
           {"peak_tflops", peaks},
           {"memory_gib", c.device.memory_bytes / double(1ull << 30)},
           {"memory_bw_gbytes_per_s", c.device.memory_bw / 1e9},
           {"dtype", c.device.dtype},
           {"runtime", c.device.runtime == Runtime::kMegatron ? "megatron" : "braid-cpu"},
           {"gemm_efficiency", curve},
           {"source", c.device.source}}},
         {"devices_per_host", c.devices_per_host},
         {"hosts_per_rack", c.hosts_per_rack},
         {"spine_oversubscription", c.spine_oversubscription},
         {"intra_host", link_json(c.intra_host)},
         {"inter_host", link_json(c.inter_host)},
         {"nics_per_host", c.nics_per_host}};
  if (c.gamma_s_per_b > 0) j["reduce_gbytes_per_s"] = 1.0 / c.gamma_s_per_b / 1e9;
  if (c.cores_per_host != (1 << 20)) j["cores_per_host"] = c.cores_per_host;
  if (c.device.cores > 0) j["device"]["cores"] = c.device.cores;
  json passes = json::object();
  const Device::PassRates& r = c.device.pass_bw;
  for (auto [key, rate] : {std::pair{"norm", r.norm},
                           {"gelu", r.gelu},
                           {"softmax", r.softmax},
                           {"optimizer", r.optimizer}})
    if (rate > 0) passes[key] = rate / 1e9;
  if (!passes.empty()) j["device"]["elementwise_gbytes_per_s"] = passes;
  if (c.memory.modelled())
    j["host_memory"] = {{"llc_mib", c.memory.llc_bytes / (1 << 20)},
                        {"copy_gbytes_per_s_cached", 1.0 / c.memory.copy_cached_s_per_b / 1e9},
                        {"copy_gbytes_per_s_beyond", 1.0 / c.memory.copy_beyond_s_per_b / 1e9},
                        {"beyond_working_set_mib", c.memory.beyond_ws_bytes / (1 << 20)},
                        {"reduce_gbytes_per_s_cached", 1.0 / c.memory.reduce_cached_s_per_b / 1e9},
                        {"source", c.memory.source}};
  return j.dump(2);
}

}  // namespace braid::plan
