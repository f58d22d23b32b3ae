// One layout's step time and memory, term by term (plan_cost.h; the rules
// and what they leave out are in docs/PLAN.md).
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "braid/plan_cost.h"
#include "plan/cost/layout.h"
#include "plan/cost/pipeline.h"
#include "plan/cost/stages.h"

namespace braid::plan {
namespace {

double mean_busy_of(const PipelineRun& run) {
  double sum = 0;
  for (double b : run.busy) sum += b;
  return run.busy.empty() ? 0 : sum / double(run.busy.size());
}

// Pipeline rank r's memory with `live` micro-batches in flight: its
// chunks' weights, gradients and optimizer state (sharded by ZeRO) and
// activations.
Memory rank_memory(const ModelDesc& m, const Device& dev, const Layout& l, const std::vector<Stage>& st, int r,
                   double live) {
  double params = 0, act = 0, work = 0;
  for (int k = 0; k < l.virtual_stages; ++k) {
    const Stage& x = st[size_t(k * l.pp + r)];
    params += x.params;
    act = std::max(act, x.act);
    work = std::max(work, x.work);
  }
  Memory mem;
  const bool mixed = dev.dtype != "f32";
  const double eb = dev.element_bytes();
  const double w = params * eb, gr = params * eb, opt = params * (mixed ? 12 : 8);
  // ZeRO-3 holds two gathered units at a time (the one running, the next).
  const double units = m.kind == "gpt" ? double(m.gpt.layers) : double(m.layers.size());
  mem.weights = l.zero >= 3 ? w / l.dp + std::min(w, 2 * w / std::max(1.0, units)) : w;
  mem.grads = l.zero >= 2 ? gr / l.dp : gr;
  mem.optimizer = l.zero >= 1 ? opt / l.dp : opt;
  mem.activations = live * act + work;
  return mem;
}

// One pipeline rank's data-parallel collectives and optimizer step.
struct DpTail {
  double comm_s = 0, exposed_s = 0, bytes = 0, optimizer_s = 0;
};

// For a rank holding `params` of the model whose backward lasts t_b and
// forward plus backward t_fb per micro-batch (M of them), `blocks` blocks.
// The gradients' reduction overlaps its last backward; ZeRO-1/2 gather the
// updated weights after the step; ZeRO-3 gathers each micro-batch's
// weights twice and reduce-scatters its gradients, overlapping its forward
// and backward.
DpTail dp_tail(Group& dpg, const Device& dev, const Layout& l, double params, double t_b, double t_fb, int M,
               double blocks, double share) {
  DpTail d;
  const double G = params * dev.element_bytes();
  if (l.zero == 0) {
    const Priced a = dpg("all_reduce", G);
    d.comm_s = a.s;
    d.exposed_s = std::max(0.0, a.s - t_b);
    d.bytes = a.bytes;
  } else {
    const Priced rsd = dpg("reduce_scatter", G), agd = dpg("all_gather", G);
    if (l.zero <= 2) {
      d.comm_s = rsd.s + agd.s;
      d.exposed_s = std::max(0.0, rsd.s - t_b) + agd.s;
      d.bytes = rsd.bytes + agd.bytes;
    } else {
      // Every micro-batch gathers the weights for its forward and again
      // for its backward, and reduce-scatters its gradients: they are
      // sharded, so none accumulate whole across micro-batches. The
      // forward's gathers hide behind the forward alone; in the backward
      // the gathers and the reduce-scatters share the links, so together
      // they hide behind the backward. The first block's gather of each
      // pass and the last block's reduce-scatter have nothing to hide
      // behind.
      const double t_f = std::max(0.0, t_fb - t_b), per = 1 / std::max(1.0, blocks);
      d.comm_s = M * (2 * agd.s + rsd.s);
      d.exposed_s = M * (std::max(0.0, agd.s - t_f) + std::max(0.0, agd.s + rsd.s - t_b) +
                         per * (2 * agd.s + rsd.s));
      d.bytes = M * (2 * agd.bytes + rsd.bytes);
    }
  }
  // A CPU rank's core does its collectives' copies and reductions itself
  // (braid's DP thread takes turns with the compute on it), so on
  // braid-cpu devices nothing of them hides behind the compute.
  if (dev.runtime == Runtime::kBraidCpu) d.exposed_s = d.comm_s;
  // The update reads and writes weights, gradients and both moments:
  // ~28 bytes per parameter it owns (f32 moments and master weights).
  d.optimizer_s =
      share * 28 * params / (l.zero >= 1 ? l.dp : 1) / dev.pass_rate(&Device::PassRates::optimizer);
  return d;
}

}  // namespace

Estimate estimate(const ModelDesc& m, const Cluster& c, const Layout& l, int64_t batch,
                  bool stop_if_unfit) {
  validate_layout(m, c, l, batch);
  Estimate e;
  e.layout = l;
  const Device& dev = c.device;
  const double eb = dev.element_bytes();
  const int tp = l.tp, pp = l.pp, chunks = l.virtual_stages;
  e.micro_batches = int(batch / (int64_t(l.dp) * l.mbs));
  const int M = e.micro_batches;
  Group tpg(c, tp, 1, "tp", e);
  const bool sp = l.sequence_parallel;

  // A CPU host whose ranks need more cores than it has time-shares them:
  // every rank's compute stretches by that ratio (this-machine at a world
  // above its cores). Collectives price it themselves (the selector's
  // oversubscription).
  const double ranks_here =
      std::min(double(tp) * pp * l.dp, double(std::max(c.devices_per_host, 1)));
  const double share =
      dev.cores > 0 ? std::max(1.0, ranks_here * dev.cores / double(c.cores_per_host)) : 1.0;
  std::vector<double> blocks_on(static_cast<size_t>(pp), 1.0);  // non-GPT: one unit
  const std::vector<Stage> st =
      m.kind == "gpt" ? gpt_stages(m, dev, l, share, tpg, blocks_on) : std::vector<Stage>{layer_stage(m, dev, l, share)};

  // The pipeline, by the checker.
  std::vector<double> fwd, bwd;
  for (const Stage& x : st) {
    fwd.push_back(x.fwd);
    bwd.push_back(x.bwd);
  }
  double transfer = 0;
  if (pp > 1) {
    // Neighbouring stages are tp ranks apart; some pair crosses hosts once
    // a pipeline spans them.
    const bool crosses = tp * pp > c.devices_per_host;
    Group pair(c, 2, crosses ? c.devices_per_host : tp, "pp", e);
    const double N = l.mbs * double(m.gpt.seq) * double(m.gpt.hidden) * eb / (sp ? tp : 1);
    transfer = pair("send", N).s;
    e.transfer_bytes = N;
    e.comm_bytes[pair.link()] += 2.0 * M * chunks * N;
  }
  if (stop_if_unfit) {
    // Every schedule keeps at least one micro-batch live on every rank.
    for (int r = 0; r < pp; ++r) {
      const Memory floor = rank_memory(m, dev, l, st, r, 1);
      if (floor.total() > e.memory.total()) e.memory = floor;
    }
    if (e.memory.total() > dev.memory_bytes) {
      e.step_s = std::numeric_limits<double>::infinity();
      return e;
    }
    e.memory = {};
  }
  const std::string sched = pp > 1 ? l.schedule : "1f1b";
  const PipelineRun run = run_pipeline(sched, pp, M, chunks, fwd, bwd, transfer);
  const PipelineRun dry = pp > 1 ? run_pipeline(sched, pp, M, chunks, fwd, bwd, 0) : run;
  // Time-shared cores (share > 1): a pipeline rank waiting in the bubble
  // leaves its core to the others, so not every stage stretches by the
  // share. The schedule is played on cores of their own and its timeline
  // stretched where more ranks compute than the host's cores hold
  // (run_pipeline's load: each computing pipeline rank stands for the
  // tp × dp ranks of its stage, share / pp cores' worth). Without
  // pipelining, or with a core a rank, that is run.makespan.
  double makespan = run.makespan;
  if (share > 1 && pp > 1) {
    std::vector<double> fwd_own, bwd_own;
    for (const Stage& x : st) {
      fwd_own.push_back(x.fwd_own);
      bwd_own.push_back(x.bwd_own);
    }
    makespan = run_pipeline(sched, pp, M, chunks, fwd_own, bwd_own, transfer, true, share / pp)
                   .shared_makespan;
  }
  e.bubble = makespan < run.makespan ? std::max(0.0, 1 - mean_busy_of(run) / makespan) : run.bubble;
  e.stage_forward_s = fwd;
  e.stage_backward_s = bwd;
  e.pipeline_s = makespan;

  // Per pipeline rank: its chunks' parameters, activations, busy time; the
  // step waits for the rank whose data-parallel tail is longest.
  Group dpg(c, l.dp, tp * pp, "dp", e);
  double worst = 0, busiest = 0, tp_bytes = 0, dp_bytes = 0, recomputed = 0;
  for (int r = 0; r < pp; ++r) {
    double params = 0, t_b = 0, t_fb = 0, tpc = 0, tpb = 0;
    for (int k = 0; k < chunks; ++k) {
      const Stage& x = st[size_t(k * pp + r)];
      params += x.params;
      t_b += x.bwd;
      t_fb += x.fwd + x.bwd;
      tpc += x.tp_fwd + x.tp_bwd;
      tpb += x.tp_bytes;
      recomputed += x.re_flops;
    }
    const Memory mem = rank_memory(m, dev, l, st, r, run.peak_live[size_t(r)]);
    const DpTail d = dp_tail(dpg, dev, l, params, t_b, t_fb, M, blocks_on[size_t(r)], share);
    const double tail = d.exposed_s + d.optimizer_s;
    if (mem.total() > e.memory.total()) e.memory = mem;
    if (tail > worst || r == 0) {
      worst = tail;
      e.dp_exposed_s = d.exposed_s;
      e.dp_comm_s = d.comm_s;
      e.optimizer_s = d.optimizer_s;
      dp_bytes = d.bytes;
    }
    if (run.busy[size_t(r)] >= busiest) {
      busiest = run.busy[size_t(r)];
      e.tp_comm_s = M * tpc;
      tp_bytes = M * tpb;
    }
  }
  if (tp > 1) e.comm_bytes[tpg.link()] += tp_bytes;
  if (l.dp > 1) e.comm_bytes[dpg.link()] += dp_bytes;
  e.compute_s = busiest - e.tp_comm_s;
  e.p2p_s = pp > 1 ? std::max(0.0, run.makespan - dry.makespan) : 0;
  e.bubble_s = std::max(0.0, makespan - busiest - e.p2p_s);
  e.step_s = makespan + e.dp_exposed_s + e.optimizer_s;
  const double devices = double(tp) * pp * l.dp;
  e.model_flops = m.model_flops_per_sample() * double(batch);
  e.hardware_flops = e.model_flops + recomputed * M * tp * l.dp;
  e.tflops_per_device = e.model_flops / e.step_s / devices / 1e12;
  e.mfu = e.model_flops / (e.step_s * devices * dev.peak(dev.dtype));
  e.fits = e.memory.total() <= dev.memory_bytes;
  return e;
}

}  // namespace braid::plan
