// braid bench --probe: the link measurement behind the cost model's cache.
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "braid/comm.h"
#include "braid/env.h"
#include "braid/error.h"
#include "braid/plan_probe.h"
#include "braid/tuning.h"
#include "link_probe.h"
#include "subcommands.h"

namespace braid::tool {

// Measures each link class rank 0 has (shared memory or TCP to a rank of
// its host, TCP to a rank on another host: its lowest peer of each), as a
// communicator does at creation when the cache lacks one, and merges the
// calibrated figures into the tuning file (comm/setup/probe.h).
int bench_probe(Communicator& comm, const std::string& probe_out) {
  if (comm.size() < 2) throw Error(Errc::kInvalidArgument, "--probe needs at least 2 ranks");
  const std::vector<ClassProbe> probes = probe_each_class(comm);
  // And, over shared memory, the memory the ranks copy through (the
  // simulator's this-machine copies; braid/plan_probe.h).
  const std::optional<plan::MemorySample> memory = probe_shm_memory(comm, probes);
  if (comm.rank() != 0) return 0;
  std::string path = probe_out.empty() ? comm::default_tuning_path() : probe_out;
  if (path.empty()) throw Error(Errc::kInvalidArgument, "--probe: no HOME; pass --probe-out FILE");
  std::string text = comm::read_tuning_file(path);
  for (const auto& [kind, peer, s] : probes) {
    if (s.core_share < comm::kMinCoreShare)
      throw Error(Errc::kInvalidArgument,
                  "--probe: the ranks of the " + kind + " link had " +
                      std::to_string(s.core_share) +
                      " of a core each (other work is running), so the figures would describe "
                      "that load, not the machine; " + path + " not written");
    text = comm::merge_probe(text, kind, s, hostname());
  }
  // And the device: one core's GEMM rate by size, for the planner's
  // this-machine preset (braid/plan_probe.h), while the other ranks wait.
  const std::vector<plan::GemmSample> gemm = plan::probe_gemm();
  text = plan::merge_gemm_probe(text, gemm);
  const plan::ElementwiseSample passes = plan::probe_elementwise();
  const bool keep_passes = passes.core_share >= comm::kMinCoreShare;
  if (keep_passes) text = plan::merge_elementwise_probe(text, passes);
  const bool keep_memory = memory && memory->core_share >= comm::kMinCoreShare;
  if (keep_memory) text = plan::merge_memory_probe(text, *memory);
  comm::write_tuning(path, text);
  for (const auto& [kind, peer, s] : probes) {
    const comm::LinkCost l = comm::calibrate_link(kind, s);
    std::printf("probe %s: alpha %.2f us, bandwidth %.2f GB/s, reduce %.2f GB/s, core share %.2f\n"
                "model %s: alpha %.2f us, bandwidth %.2f GB/s, reduce %.2f GB/s -> %s\n",
                kind.c_str(), s.alpha_s * 1e6, s.gbps, s.reduce_gbps, s.core_share, kind.c_str(),
                l.alpha_s * 1e6, 1 / l.beta_s_per_b / 1e9, comm::calibrate_reduce_gbps(kind, s),
                path.c_str());
  }
  if (memory)
    std::printf("memory over shm: one way %.2f GB/s with the buffers in the %.0f MiB cache, %.2f GB/s "
                "beyond it (%.0f MiB); reduce %.2f GB/s cached; core share %.2f -> %s\n",
                memory->cached_gbps, memory->llc_bytes / (1 << 20), memory->beyond_gbps,
                memory->beyond_ws_bytes / (1 << 20), memory->reduce_gbps, memory->core_share,
                keep_memory ? path.c_str() : "not kept (other work shared the cores)");
  std::printf("gemm f32, one thread:");
  for (const plan::GemmSample& g : gemm) std::printf(" %.3g GFLOP/s", g.flop_s / 1e9);
  std::printf(" (32 to 1024 square) -> %s\n", path.c_str());
  std::printf(
      "element-wise f32, one thread: residual + layer norm %.1f GB/s, bias + GELU %.1f GB/s, "
      "causal softmax %.1f GB/s, AdamW %.1f GB/s; core share %.2f -> %s\n",
      passes.norm_gbps, passes.gelu_gbps, passes.softmax_gbps, passes.optimizer_gbps,
      passes.core_share, keep_passes ? path.c_str() : "not kept (other work shared the core)");
  return 0;
}

}  // namespace braid::tool
