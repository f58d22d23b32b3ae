// plan::estimate — the predicted step time and memory of one layout of a
// model on a cluster, term by term.
//
// Compute: each layer's FLOPs at the device's peak × its GEMM efficiency at
// the layer's GEMM size. Collectives: price_collective (braid/tuning.h),
// i.e. the runtime selector and the registry's cost formula of the entry
// it would run, over the group's placement: inside a host (intra_host
// link), across hosts (inter_host link, the hierarchical all-reduce where
// it applies), across racks (the inter-host β scaled by the flows sharing
// a rack's oversubscribed uplink, and by the flows sharing a host's NICs).
// The pipeline: the real schedule (parallel::make_schedule) played by the
// schedule checker (check_schedule) with the stages' measured-by-model
// forward, backward and transfer times; its makespan and bubble are the
// step's, and its peak live micro-batches size the activations.
// docs/PLAN.md states every rule and what is not modelled.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "braid/plan_cluster.h"
#include "braid/plan_model.h"

namespace braid::plan {

enum class Recompute { kNone, kSelective, kFull };
const char* recompute_name(Recompute r);
Recompute parse_recompute(const std::string& s);  // "none" | "selective" | "full"

// World rank = (d·pp + p)·tp + t, as parallel::Mesh lays ranks out.
struct Layout {
  int tp = 1, pp = 1, dp = 1;
  int mbs = 1;                   // sequences per micro-batch
  std::string schedule = "1f1b"; // "gpipe" | "1f1b" | "interleaved"
  int virtual_stages = 1;        // chunks per pipeline rank (interleaved ≥ 2)
  Recompute recompute = Recompute::kNone;
  bool sequence_parallel = false;
  int zero = 0;                  // ZeRO stage 0–3 over dp
};
std::string layout_text(const Layout& l);  // "tp=8 pp=4 dp=32 mbs=1 1f1b zero=1 ..."

struct Memory {
  double weights = 0, grads = 0, optimizer = 0, activations = 0;
  double total() const { return weights + grads + optimizer + activations; }
};

struct Estimate {
  Layout layout;
  int micro_batches = 0;
  double step_s = 0;
  // The step split: compute (busy time of the busiest pipeline rank, tp
  // communication included), the pipeline's idle time, data-parallel
  // communication not hidden behind backward, the optimizer's update.
  double compute_s = 0, tp_comm_s = 0, p2p_s = 0, bubble_s = 0, dp_exposed_s = 0, optimizer_s = 0;
  double dp_comm_s = 0;  // all of it, hidden or not
  double bubble = 0;     // the checker's idle fraction of rank-time
  double model_flops = 0, hardware_flops = 0;  // per step, all devices
  double tflops_per_device = 0;  // model FLOPs / step / devices / 1e12
  double mfu = 0;                // model FLOPs / (step × devices × peak)
  Memory memory;                 // per device, the fullest stage's
  bool fits = false;
  std::map<std::string, double> comm_bytes;  // per device per step, by link class
  std::map<std::string, std::string> algorithms;  // "dp all_reduce" → "ring"
  // What the simulator replays (plan_sim.h, `braid plan --simulate`): each
  // virtual stage's forward and backward seconds per micro-batch, one
  // pipeline transfer's bytes, the pipeline's played makespan, and for
  // each entry of `algorithms` the bytes of its largest call.
  std::vector<double> stage_forward_s, stage_backward_s;
  double transfer_bytes = 0;
  double pipeline_s = 0;
  std::map<std::string, double> call_bytes;  // "dp all_reduce" → bytes
  double exposed_comm_s() const { return tp_comm_s + p2p_s + dp_exposed_s; }
};

// The estimate of `l` for a global batch of `batch` samples (sequences).
// Throws Error(kInvalidArgument) naming the field for a layout that cannot
// run: tp·pp·dp ≠ devices, batch not a multiple of dp·mbs, heads or hidden
// not a multiple of tp, tp spanning hosts, fewer blocks than pipeline
// stages, an interleaved schedule whose micro-batches are not a multiple of
// pp, ZeRO-2/3 with pp > 1, model parallelism of a non-GPT model.
// stop_if_unfit: when the memory with one micro-batch live per rank (a
// floor for every schedule) already exceeds the device, return at once
// with fits false, that floor as `memory` and step_s infinite, without
// playing the pipeline (what the search does).
Estimate estimate(const ModelDesc& m, const Cluster& c, const Layout& l, int64_t batch,
                  bool stop_if_unfit = false);

// The group of `size` ranks whose members stride by `stride` world ranks,
// placed on `c`: its GroupLinks (contention folded into the inter-host
// β), and the link class its traffic crosses most slowly.
struct Placement {
  comm::GroupLinks links;
  std::string link_class;
  bool spans_racks = false;
};
Placement place_group(const Cluster& c, int size, int stride);

}  // namespace braid::plan
