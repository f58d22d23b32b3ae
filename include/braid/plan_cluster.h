// plan::Cluster — the machines a layout is planned for: one kind of device
// (peak FLOP/s per dtype, memory, memory bandwidth, a GEMM efficiency curve
// by size), hosts of `devices_per_host` devices, racks of `hosts_per_rack`
// hosts behind a spine with an oversubscription ratio, and the link
// classes between devices of a host and between hosts, each an α-β pair.
//
// A cluster is a preset (cluster_preset) or a JSON file whose schema, and
// the source of every preset constant, docs/PLAN.md gives. Link classes
// are named from a built-in catalogue (link_class) or written inline.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "braid/tuning.h"

namespace braid::plan {

// One point of a device's GEMM efficiency curve: a GEMM of `flops`
// (2·m·n·k) runs at `efficiency` × peak.
struct EfficiencyPoint {
  double flops = 0;
  double efficiency = 0;
};

// The runtime a cluster's devices train under, where runtimes differ in
// what the model counts:
//  - kMegatron: activations as Megatron-LM counts them (the tensors
//    backward needs, each buffer freed once used), blocks cut evenly over
//    pipeline stages;
//  - kBraidCpu: braid's CPU layers (braid/layers.h, braid/tp_layers.h),
//    which keep each layer's output and gradient buffers between steps
//    (a step after the first allocates nothing), and braid's own cut of
//    the model's units over stages (partition_layers over the ModelSpec's
//    unit costs, as `braid train --pp` cuts them).
enum class Runtime { kMegatron, kBraidCpu };

struct Device {
  std::string name;
  std::map<std::string, double> peak_flops;  // FLOP/s by dtype ("bf16", "f32", ...)
  double memory_bytes = 0;
  double memory_bw = 0;  // bytes/s
  // The dtype training runs in: "bf16" (mixed precision: bf16 weights,
  // activations and gradients, f32 master weights and Adam moments) or
  // "f32" (everything f32, as braid trains today).
  std::string dtype = "bf16";
  // In a cluster file: "runtime": "megatron" (the default) or "braid-cpu".
  Runtime runtime = Runtime::kMegatron;
  // Cores one device is (a CPU device; 0: not a CPU). With cores_per_host,
  // it tells when a host's ranks outnumber its cores and time-share them.
  int cores = 0;
  std::vector<EfficiencyPoint> gemm_efficiency;  // ascending flops
  // Measured rates of the memory-bound passes by kind, bytes/s in the
  // planner's count of each (docs/PLAN.md, "The cost model"); 0: the kind
  // runs at memory_bw. In a cluster file: "elementwise_gbytes_per_s":
  // {"norm", "gelu", "softmax", "optimizer"}, any of them; `this-machine`
  // takes them from `braid bench --probe` (braid/plan_probe.h).
  struct PassRates {
    double norm = 0;       // residual add + layer norm
    double gelu = 0;       // bias + GELU
    double softmax = 0;    // the attention's causal softmax
    double optimizer = 0;  // AdamW's update
  } pass_bw;
  std::string source;  // where the figures come from

  // Peak FLOP/s of `dtype`; Error(kInvalidArgument) naming the device if
  // it has none.
  double peak(const std::string& dtype) const;
  // The curve at a GEMM of `flops`, linear in log(flops) between points,
  // flat beyond the ends.
  double efficiency(double flops) const;
  // The rate of one kind of pass (e.g. &PassRates::gelu): measured, else
  // memory_bw.
  double pass_rate(double PassRates::*kind) const {
    return pass_bw.*kind > 0 ? pass_bw.*kind : memory_bw;
  }
  // Bytes a parameter, activation or gradient element takes in `dtype`.
  double element_bytes() const { return dtype == "f32" ? 4 : 2; }
};

struct LinkClass {
  std::string name;
  comm::LinkCost cost;         // α per message, β per byte, one direction
  bool shared_memory = false;  // braid's shm wire (its chain all-reduce may run)
  std::string source;
};

// How a host's CPU ranks copy and reduce through memory (braid-cpu devices
// over braid's shared-memory wire), for the simulator: the wire's one-way
// rate with the ranks' buffers in the last-level cache and far beyond it,
// and a cached reduction's rate (plan::probe_memory measures them here).
// A call's working set W is the buffers of its ranks on the host; the
// share beyond the cache is f = max(0, 1 − llc / W). A byte beyond it
// costs Δ more than a cached one: Δ = (t_beyond − t_cached) / f_b from the
// beyond measurement (f_b at its working set). A byte then costs, by
// the user buffers its pass touches: a copy into or out of a slot
// t_cached + f·Δ (one); a reduction of a received block into its
// accumulator in place γ_cached + f·Δ (one: the other operand is the
// slot, whose lines come from memory at any W, as in both measurements);
// a local copy between two buffers γ_cached + 2·f·Δ (two).
// All zero: not modelled (the link's β and the cluster's γ are used).
struct HostMemory {
  double llc_bytes = 0;
  double copy_cached_s_per_b = 0;
  double copy_beyond_s_per_b = 0;
  double beyond_ws_bytes = 0;  // the working set of the beyond measurement
  double reduce_cached_s_per_b = 0;
  std::string source;

  bool modelled() const { return llc_bytes > 0; }
  // The share of a working set of `ws` bytes beyond the cache.
  double beyond_share(double ws) const;
  // Per byte: a copy into or out of a slot; a reduction from a slot in
  // place; a copy between two buffers of a rank.
  double copy_s_per_b(double ws) const;
  double reduce_s_per_b(double ws) const;
  double local_copy_s_per_b(double ws) const;
};

struct Cluster {
  std::string name;
  Device device;
  int devices_per_host = 1;
  int hosts_per_rack = 1;
  // Rack uplink to spine, as downlink : uplink (1: non-blocking; 4 for
  // 1:4). Flows leaving a rack share its uplink.
  double spine_oversubscription = 1;
  LinkClass intra_host;  // between two devices of one host
  LinkClass inter_host;  // a NIC to the rack's switch
  int nics_per_host = 1;  // flows leaving a host share these
  double gamma_s_per_b = 0;  // reduction time per byte (0: 3 bytes per element / memory_bw)
  int cores_per_host = 1 << 20;  // CPU clusters: ranks beyond them time-share
  HostMemory memory;             // CPU clusters: the simulator's copies (see HostMemory)
};

// The link classes braid knows by name ("nvlink3", "nvlink4",
// "nvswitch-a100", "nvswitch-h100", "pcie4", "pcie5", "ib-hdr", "ib-ndr",
// "eth-10g", "eth-25g", "eth-100g", "eth-200g", "eth-400g", and this
// machine's "shm" and "tcp-loopback" from its tuning file).
std::vector<std::string> link_class_names();
// Throws Error(kInvalidArgument) listing the names for an unknown one.
LinkClass link_class(const std::string& name);

// "dgx-a100", "dgx-h100", "eth-cpu", "this-machine".
std::vector<std::string> preset_names();
// Throws Error(kInvalidArgument) listing the presets for an unknown name.
Cluster cluster_preset(const std::string& name);
// A cluster from JSON text; `from` names the file in errors, which name
// the field ("dgx.json: device.memory_gb: must be a number > 0").
Cluster parse_cluster(const std::string& text, const std::string& from);
// A preset by name, else the file at that path (Error(kIo) if unreadable).
Cluster load_cluster(const std::string& preset_or_path);
// The cluster as JSON in the file schema (what parse_cluster reads back).
std::string cluster_json(const Cluster& c);

}  // namespace braid::plan
