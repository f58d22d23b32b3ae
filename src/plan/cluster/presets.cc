// The built-in link classes and cluster presets. Each figure carries its
// source; docs/PLAN.md repeats them as a table. Bandwidths are one
// direction of one device's port, as the α-β model's β reads them.
#include <algorithm>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <unistd.h>

#include "braid/env.h"
#include "braid/error.h"
#include "braid/plan_cluster.h"
#include "braid/plan_probe.h"
#include "braid/tuning.h"

namespace braid::plan {
namespace {

constexpr double kGiB = double(1ull << 30);

LinkClass make_link(const char* name, double alpha_us, double gbytes_per_s, const char* source) {
  LinkClass l;
  l.name = name;
  l.cost.alpha_s = alpha_us * 1e-6;
  l.cost.beta_s_per_b = 1.0 / (gbytes_per_s * 1e9);
  l.source = source;
  return l;
}

// α of GPU links is not on any spec sheet: it is the per-step latency a
// collective library pays (a kernel's hand-off plus the wire), taken as a
// round figure ("alpha assumed") and meant to be replaced by a measurement:
// nccl-tests `all_reduce_perf -b 8 -e 8 -g 8` on the host (time over the
// ring's 2(n−1) steps), or `-b 8 -e 8` across two hosts for a NIC.

std::vector<LinkClass> catalogue() {
  std::vector<LinkClass> v;
  v.push_back(make_link("nvlink3", 2, 300,
                        "A100 datasheet: NVLink 600 GB/s bidirectional per GPU; alpha assumed"));
  v.push_back(make_link("nvlink4", 2, 450,
                        "H100 SXM datasheet: NVLink 900 GB/s bidirectional per GPU; alpha assumed"));
  v.push_back(make_link("nvswitch-a100", 2, 300,
                        "DGX A100: 6 NVSwitches, every GPU at its full 600 GB/s NVLink "
                        "bidirectional to any other; alpha assumed"));
  v.push_back(make_link("nvswitch-h100", 2, 450,
                        "DGX H100: 4 NVSwitches, every GPU at its full 900 GB/s NVLink "
                        "bidirectional to any other; alpha assumed"));
  v.push_back(make_link("pcie4", 5, 31.5,
                        "PCIe 4.0 x16: 16 GT/s x 16 lanes, 128b/130b = 31.5 GB/s per "
                        "direction; alpha assumed"));
  v.push_back(make_link("pcie5", 5, 63,
                        "PCIe 5.0 x16: 32 GT/s x 16 lanes, 128b/130b = 63 GB/s per "
                        "direction; alpha assumed"));
  v.push_back(make_link("ib-hdr", 5, 25, "InfiniBand HDR (ConnectX-6): 200 Gb/s per port; alpha assumed"));
  v.push_back(make_link("ib-ndr", 5, 50, "InfiniBand NDR (ConnectX-7): 400 Gb/s per port; alpha assumed"));
  // Ethernet α: braid's TCP default (include/braid/tuning.h, 20 µs,
  // measured over loopback on the reference VM), a floor for a real wire.
  const char* eth = "Ethernet line rate; alpha = braid's built-in TCP alpha (include/braid/tuning.h)";
  v.push_back(make_link("eth-10g", 20, 1.25, eth));
  v.push_back(make_link("eth-25g", 20, 3.125, eth));
  v.push_back(make_link("eth-100g", 20, 12.5, eth));
  v.push_back(make_link("eth-200g", 20, 25, eth));
  v.push_back(make_link("eth-400g", 20, 50, eth));
  return v;
}

// This machine's links as braid's own probe calibrated them: the tuning
// file `braid bench -n 2 --probe` writes (BRAID_TUNING or
// ~/.cache/braid/tuning.json), else the built-in defaults. Read only when
// named, so a bad BRAID_TUNING concerns only the clusters that use them.
const char* const kThisMachine[] = {"shm", "tcp-loopback"};

LinkClass this_machine_link(const std::string& name) {
  const comm::CostParams p = comm::parse_cost_params(comm::read_tuning(), "tuning file");
  if (name == "shm")
    return {"shm", p.shm, true,
            "this machine's shared memory: braid's calibrated CostParams (braid bench -n 2 "
            "--probe)"};
  return {"tcp-loopback", p.tcp, false,
          "this machine's loopback TCP: braid's calibrated CostParams (braid bench -n 2 --probe)"};
}

// A GPU's dense GEMM efficiency against the GEMM's FLOPs. Not measured: a
// generic shape (a GEMM below ~10 MFLOP is bound by its launch, one above
// ~100 GFLOP runs near the 0.75–0.8 of dense peak that cuBLAS reaches on
// large bf16 GEMMs), to be replaced by a measured curve
// (docs/PLAN.md says how).
std::vector<EfficiencyPoint> generic_gpu_curve() {
  return {{1e6, 0.01}, {1e7, 0.05}, {1e8, 0.2}, {1e9, 0.45}, {1e10, 0.65}, {1e11, 0.75}, {1e12, 0.8}};
}

// A CPU core's sgemm efficiency (OpenBLAS-class kernels): generic, not
// measured; small GEMMs lose to packing and loop overhead.
std::vector<EfficiencyPoint> generic_cpu_curve() {
  return {{1e4, 0.05}, {1e5, 0.2}, {1e6, 0.5}, {1e7, 0.7}, {1e8, 0.8}, {1e9, 0.85}};
}

// A DGX: eight SXM GPUs of 80 GiB on NVSwitch, one compute NIC per GPU,
// four hosts a rack (an assumption of rack power, not a spec) and a
// non-blocking spine (NVIDIA's SuperPOD reference design: a rail-optimised
// full fat tree).
Cluster dgx(const char* name, const char* gpu, std::map<std::string, double> peaks,
            double memory_bw, const char* source, const char* nvswitch, const char* nic) {
  Cluster c;
  c.name = name;
  c.device.name = gpu;
  c.device.peak_flops = std::move(peaks);
  c.device.memory_bytes = 80 * kGiB;
  c.device.memory_bw = memory_bw;
  c.device.dtype = "bf16";
  c.device.gemm_efficiency = generic_gpu_curve();
  c.device.source = source;
  c.devices_per_host = 8;
  c.hosts_per_rack = 4;
  c.intra_host = link_class(nvswitch);
  c.inter_host = link_class(nic);
  c.nics_per_host = 8;
  return c;
}

Cluster dgx_a100() {
  return dgx("dgx-a100", "A100-SXM4-80GB",
             {{"bf16", 312e12}, {"f16", 312e12}, {"tf32", 156e12}, {"f32", 19.5e12}}, 2039e9,
             "NVIDIA A100 datasheet (SXM4 80GB): bf16/f16 dense 312 TFLOP/s, tf32 156, f32 19.5; "
             "HBM2e 2039 GB/s; GEMM curve generic (src/plan/cluster/presets.cc)",
             "nvswitch-a100", "ib-hdr");
}

// One H100's bf16 GEMM rate, measured: square products M = N = K of n,
// TFLOP/s (bench/results/2026-11-27_h100-gemm.json, `python3
// bench/gpu/gemm_curve.py`, cuBLAS through PyTorch, CUDA-graph replays).
// The dip at 3072 is in the data (one run); it is kept as measured.
std::vector<EfficiencyPoint> measured_h100_bf16_curve(double peak) {
  const std::pair<double, double> square[] = {
      {256, 13.1},   {512, 84.0},   {768, 228.9},  {1024, 373.9}, {1536, 603.4},
      {2048, 686.2}, {3072, 592.1}, {4096, 688.3}, {8192, 712.8}, {16384, 692.2}};
  std::vector<EfficiencyPoint> v;
  for (auto [n, tflops] : square) v.push_back({2 * n * n * n, tflops * 1e12 / peak});
  return v;
}

Cluster dgx_h100() {
  Cluster c = dgx("dgx-h100", "H100-SXM5-80GB",
                  {{"bf16", 989.4e12}, {"f16", 989.4e12}, {"fp8", 1978.9e12}, {"tf32", 494.7e12},
                   {"f32", 66.9e12}},
                  3.01e12,
                  "NVIDIA H100 datasheet (SXM5): bf16/f16 dense 989.4 TFLOP/s, fp8 1978.9, tf32 "
                  "494.7, f32 66.9. Measured on one H100 (bench/results/2026-11-27_h100-gemm.md): "
                  "bf16 GEMM curve, 85017493504 bytes of memory, 3.01 TB/s device copy",
                  "nvswitch-h100", "ib-ndr");
  c.device.gemm_efficiency = measured_h100_bf16_curve(c.device.peak("bf16"));
  c.device.memory_bytes = 85017493504.0;
  return c;
}

// A commodity CPU cluster: two-socket servers, one rank per socket, one
// 25 GbE port per server, 16 servers per rack behind a 1:4 uplink.
Cluster eth_cpu() {
  Cluster c;
  c.name = "eth-cpu";
  c.device.name = "x86 socket, 32 cores AVX2 at 2.0 GHz";
  // 32 cores × 2.0 GHz × 32 f32 FLOP/cycle (two 8-lane FMA pipes).
  c.device.peak_flops = {{"f32", 32 * 2.0e9 * 32}};
  c.device.memory_bytes = 256 * kGiB;
  c.device.memory_bw = 204.8e9;  // 8 channels of DDR4-3200 × 25.6 GB/s
  c.device.dtype = "f32";
  c.device.runtime = Runtime::kBraidCpu;  // braid's CPU layers run here
  c.device.cores = 32;
  c.device.gemm_efficiency = generic_cpu_curve();
  c.device.source =
      "peak = cores x clock x 32 f32 FLOP/cycle (AVX2, 2 FMA pipes); DDR4-3200 x 8 "
      "channels = 204.8 GB/s; GEMM curve generic (src/plan/cluster/presets.cc)";
  c.devices_per_host = 2;
  c.hosts_per_rack = 16;
  c.spine_oversubscription = 4;
  c.intra_host = link_class("shm");
  c.inter_host = link_class("eth-25g");
  c.nics_per_host = 1;
  c.cores_per_host = 64;
  return c;
}

double cpu_mhz() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("cpu MHz", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return std::stod(line.substr(colon + 1));
    }
  return 2000;  // no clock reported: a round 2 GHz
}

// This machine: one rank per usable core (braid's own default when ranks
// share a host), over the shared memory and loopback TCP braid's probe
// calibrated.
Cluster this_machine() {
  Cluster c;
  c.name = "this-machine";
  const int cores = usable_cores();
  const double hz = cpu_mhz() * 1e6;
  c.device.name = "one core of this machine";
  c.device.peak_flops = {{"f32", hz * 32}};
  // The GEMM curve measured here (`braid bench --probe`, or `braid plan`'s
  // first use), when the tuning file has one: each size's rate over the
  // peak (raised to the fastest measured rate where that beats the clock's
  // estimate, e.g. AVX-512).
  const std::string tuning = comm::read_tuning();  // read once: GEMMs, γ, memory
  const std::vector<GemmSample> gemm = gemm_probe_from(tuning, "tuning file");
  const double pages = double(sysconf(_SC_PHYS_PAGES)), page = double(sysconf(_SC_PAGESIZE));
  c.device.memory_bytes = pages > 0 && page > 0 ? pages * page / cores : 4 * kGiB;
  c.device.memory_bw = 10e9;
  c.device.dtype = "f32";
  c.device.runtime = Runtime::kBraidCpu;  // braid's CPU layers run here
  c.device.gemm_efficiency = generic_cpu_curve();
  c.device.source =
      "peak = /proc/cpuinfo 'cpu MHz' x 32 f32 FLOP/cycle (AVX2 FMA); memory = physical "
      "memory / usable cores; 10 GB/s memory bandwidth per core assumed; GEMM curve generic "
      "(run `braid bench -n 2 --probe` to measure it)";
  if (!gemm.empty()) {
    double best = 0;
    for (const GemmSample& g : gemm) best = std::max(best, g.flop_s);
    const double peak = std::max(hz * 32, best);
    c.device.peak_flops = {{"f32", peak}};
    c.device.gemm_efficiency.clear();
    for (const GemmSample& g : gemm) c.device.gemm_efficiency.push_back({g.flops, g.flop_s / peak});
    c.device.source =
        "peak = the larger of /proc/cpuinfo 'cpu MHz' x 32 f32 FLOP/cycle and the fastest "
        "GEMM measured; GEMM curve measured by `braid bench --probe` or `braid plan`'s first use (one "
        "thread, 32-1024 square, tuning file gemm_f32_1thread); memory = physical memory / usable cores; 10 "
        "GB/s memory bandwidth per core assumed";
  }
  // The block's memory-bound passes and the optimizer at the rates braid's
  // own kernels reach here, when the tuning file has them (the probe);
  // what is left (embedding gathers, the attention's bias and reshapes)
  // stays at the assumed memory bandwidth.
  if (const auto e = elementwise_probe_from(tuning, "tuning file")) {
    c.device.pass_bw = {e->norm_gbps * 1e9, e->gelu_gbps * 1e9, e->softmax_gbps * 1e9,
                        e->optimizer_gbps * 1e9};
    c.device.source +=
        "; residual + layer norm, bias + GELU, causal softmax and AdamW at the rates `braid bench "
        "--probe` measured through braid's kernels (one thread, tuning file "
        "elementwise_f32_1thread)";
  }
  // Every rank braid runs here is on this host; beyond its cores they
  // time-share them (Device::cores, cores_per_host).
  c.device.cores = 1;
  c.devices_per_host = 1 << 16;
  c.hosts_per_rack = 1;
  c.intra_host = link_class("shm");
  c.inter_host = link_class("tcp-loopback");
  // Reductions at the rate the probe measured, as the runtime selector
  // prices them (not 3 bytes an element at the assumed memory bandwidth).
  c.gamma_s_per_b = comm::parse_cost_params(tuning, "tuning file").gamma_s_per_b;
  c.nics_per_host = 1;
  c.cores_per_host = cores;
  // The memory the ranks copy through, for the simulator, when the tuning
  // file has the probe's sample (`braid bench -n 2 --probe`).
  if (const auto m = memory_probe_from(tuning, "tuning file")) {
    c.memory.llc_bytes = m->llc_bytes;
    c.memory.copy_cached_s_per_b = 1.0 / (m->cached_gbps * 1e9);
    c.memory.copy_beyond_s_per_b = 1.0 / (m->beyond_gbps * 1e9);
    c.memory.beyond_ws_bytes = m->beyond_ws_bytes;
    c.memory.reduce_cached_s_per_b = 1.0 / (m->reduce_gbps * 1e9);
    c.memory.source =
        "braid bench -n 2 --probe (tuning file shm_memory): braid's shared-memory wire one way "
        "with 1 MiB and 64 MiB messages, a cached f32 reduction, the last-level cache from sysfs";
  }
  return c;
}

}  // namespace

std::vector<std::string> link_class_names() {
  std::vector<std::string> v;
  for (const LinkClass& l : catalogue()) v.push_back(l.name);
  for (const char* n : kThisMachine) v.push_back(n);
  return v;
}

LinkClass link_class(const std::string& name) {
  for (const char* n : kThisMachine)
    if (name == n) return this_machine_link(name);
  std::string list;
  for (const LinkClass& l : catalogue()) {
    if (l.name == name) return l;
    list += (list.empty() ? "" : ", ") + l.name;
  }
  for (const char* n : kThisMachine) list += std::string(", ") + n;
  throw Error(Errc::kInvalidArgument, "unknown link class '" + name + "' (known: " + list + ")");
}

std::vector<std::string> preset_names() { return {"dgx-a100", "dgx-h100", "eth-cpu", "this-machine"}; }

Cluster cluster_preset(const std::string& name) {
  if (name == "dgx-a100") return dgx_a100();
  if (name == "dgx-h100") return dgx_h100();
  if (name == "eth-cpu") return eth_cpu();
  if (name == "this-machine") return this_machine();
  std::string list;
  for (const std::string& p : preset_names()) list += (list.empty() ? "" : ", ") + p;
  throw Error(Errc::kInvalidArgument, "unknown cluster preset '" + name + "' (known: " + list + ")");
}

}  // namespace braid::plan
