// plan::simulate_collective — braid's real collective algorithms (the
// registry's code, src/comm/algo/) played for up to thousands of ranks in
// one process over a simulated network of a plan::Cluster, with a virtual
// clock; and simulate_pipeline — a pipeline schedule (braid/schedule.h)
// played with compute times given and its transfers over the same network.
//
// Ranks are packed by host and hosts by rack in rank order. Each message
// costs α + B·β of its link class (intra_host, inter_host; across racks
// through the rack's oversubscribed uplink), and waits while a link of its
// path is busy; a receive-reduce costs B·γ on the receiving rank (γ as the
// planner's placement takes it). docs/PLAN.md ("The simulator") gives the
// model, what it leaves out, and how it compares with the closed forms.
// Single-threaded; a simulation is independent of any other. Errors:
// Error(kInvalidArgument) for an unknown collective or algorithm, one that
// cannot run on the simulated network (shared-memory algorithms), bytes not
// a multiple of 4·ranks where the collective splits them, ranks < 1.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "braid/plan_cluster.h"
#include "braid/schedule.h"

namespace braid::plan {

struct SimOptions {
  // The communicator's pipelining chunk (BRAID_CHUNK_BYTES's default).
  size_t chunk_bytes = size_t(1) << 20;
  // Move and reduce f32 payloads for real (small worlds: every rank holds
  // its buffers); `fill(rank, buf, count)` writes a rank's input (default:
  // element i of rank r is (r + 1) · (i mod 7 + 1)). Without, only sizes
  // travel.
  bool carry_data = false;
  std::function<void(int rank, float* buf, size_t count)> fill;
  // Where the groups sit: member i of group g is device g·group_stride +
  // i·stride. One group of consecutive devices by default; every dp group
  // of a tp × pp layout is stride tp·pp, group_stride 1, groups tp·pp;
  // every tp group stride 1, group_stride tp, groups devices / tp. Groups
  // run at once, sharing NICs and uplinks; the result is the slowest's.
  int stride = 1;
  int groups = 1;
  int group_stride = 1;
  // Record a Chrome-trace timeline (SimResult::trace_json), at most
  // trace_limit events.
  bool trace = false;
  size_t trace_limit = 1'000'000;
};

struct SimResult {
  std::string collective, algorithm;
  int ranks = 0;
  size_t bytes = 0;
  double seconds = 0;  // virtual time until the last rank finished
  uint64_t messages = 0;
  std::map<std::string, double> bytes_by_link;  // "intra_host", "inter_host", "spine"
  // Summed over messages: time waiting for busy links (behind the same
  // rank's earlier messages too, as a pipeline's chunks queue).
  double waited_s = 0;
  // Without carry_data, when all ranks' buffers would pass 256 MiB, the
  // algorithm ran on 1/byte_scale of the elements (a multiple of ranks, at
  // least 16 a rank) and each message counted byte_scale times its bytes.
  double byte_scale = 1;
  double wall_s = 0;  // real seconds the simulation took
  std::vector<std::vector<float>> outputs;  // carry_data: each rank's result
  std::string trace_json;
  size_t trace_dropped = 0;
};

// Simulates `collective` ("all_reduce", "broadcast", "reduce", "all_gather",
// "reduce_scatter"; root 0) of `bytes` (its natural size, as
// comm::price_collective counts it; f32) with registry algorithm `algo`
// ("ring", "hd", "rd", "hier", "tree", "chain", "direct", "oneshot", ...)
// on `ranks` devices of `c` (SimOptions::stride, groups).
SimResult simulate_collective(const Cluster& c, const std::string& collective,
                              const std::string& algo, size_t bytes, int ranks,
                              const SimOptions& o = {});

// The closed form the planner prices the same call with: the registry
// entry's cost formula (comm::price_algorithm) over place_group(c, ranks,
// stride), with a ring cut into chunks of `chunk_bytes` (SimOptions'
// default: the runtime's).
double closed_form_seconds(const Cluster& c, const std::string& collective,
                           const std::string& algo, size_t bytes, int ranks, int stride = 1,
                           size_t chunk_bytes = size_t(1) << 20);

struct PipelineSimResult {
  double makespan = 0;  // seconds, virtual
  double bubble = 0;    // 1 − Σ compute / (ranks × makespan)
  double transfer_s = 0;  // summed time ranks spent in communication actions
  std::string trace_json;
};

// Plays schedule `s` on `c`: pipeline rank r is device r·stride (so that
// stages of one pipeline sit where parallel::Mesh puts them, tp apart); a
// compute action of virtual stage v takes forward[v] (or backward[v])
// seconds, as the planner's run_pipeline costs it; each transfer moves
// `transfer_bytes` over the simulated links (eager sends, where the
// checker assumes rendezvous). Throws Error(kInvalidArgument) for a
// schedule the checker rejects or stage times of the wrong count.
PipelineSimResult simulate_pipeline(const Cluster& c, const parallel::Schedule& s,
                                    const std::vector<double>& forward,
                                    const std::vector<double>& backward, double transfer_bytes,
                                    int stride = 1, bool trace = false);

}  // namespace braid::plan
