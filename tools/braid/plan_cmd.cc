// braid plan: the best layouts of a model on a cluster, from the planner's
// public API (braid/plan_search.h); what is fixed on the command line stays
// fixed, the rest is searched.
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "braid/error.h"
#include "braid/plan_probe.h"
#include "braid/plan_search.h"
#include "plan_sim_cmd.h"
#include "sizes.h"
#include "subcommands.h"

namespace braid::tool {
namespace {

using nlohmann::json;

std::string gib(double b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", b / double(1ull << 30));
  return buf;
}

std::string bytes_text(double b) {
  char buf[32];
  if (b >= 1e12) std::snprintf(buf, sizeof buf, "%.2f TB", b / 1e12);
  else if (b >= 1e9) std::snprintf(buf, sizeof buf, "%.2f GB", b / 1e9);
  else std::snprintf(buf, sizeof buf, "%.1f MB", b / 1e6);
  return buf;
}

json layout_json(const plan::Layout& l) {
  return {{"tp", l.tp},
          {"pp", l.pp},
          {"dp", l.dp},
          {"mbs", l.mbs},
          {"schedule", l.schedule},
          {"virtual_stages", l.virtual_stages},
          {"recompute", plan::recompute_name(l.recompute)},
          {"sequence_parallel", l.sequence_parallel},
          {"zero", l.zero}};
}

json estimate_json(const plan::Estimate& e, int rank) {
  return {{"rank", rank},
          {"layout", layout_json(e.layout)},
          {"micro_batches", e.micro_batches},
          {"step_s", e.step_s},
          {"tflops_per_device", e.tflops_per_device},
          {"mfu", e.mfu},
          {"memory_bytes_per_device", e.memory.total()},
          {"memory",
           {{"weights", e.memory.weights},
            {"grads", e.memory.grads},
            {"optimizer", e.memory.optimizer},
            {"activations", e.memory.activations}}},
          {"bubble", e.bubble},
          {"compute_s", e.compute_s},
          {"tp_comm_s", e.tp_comm_s},
          {"p2p_s", e.p2p_s},
          {"bubble_s", e.bubble_s},
          {"dp_comm_s", e.dp_comm_s},
          {"dp_exposed_s", e.dp_exposed_s},
          {"optimizer_s", e.optimizer_s},
          {"exposed_comm_s", e.exposed_comm_s()},
          {"model_flops", e.model_flops},
          {"hardware_flops", e.hardware_flops},
          {"comm_bytes", e.comm_bytes},
          {"algorithms", e.algorithms}};
}

void print_text(const plan::Estimate& e, int rank, const plan::Cluster& c) {
  std::printf("#%d %s  (%d micro-batches)\n", rank, plan::layout_text(e.layout).c_str(),
              e.micro_batches);
  std::printf("   step %.4g s | %.4g TFLOP/s per device | MFU %.1f%% | memory %s "
              "(weights %s, grads %s, optimizer %s, activations %s)\n",
              e.step_s, e.tflops_per_device, 100 * e.mfu, gib(e.memory.total()).c_str(),
              gib(e.memory.weights).c_str(), gib(e.memory.grads).c_str(),
              gib(e.memory.optimizer).c_str(), gib(e.memory.activations).c_str());
  std::printf("   compute %.4g s, exposed comm %.4g s (tp %.4g, pipeline transfers %.4g, dp "
              "%.4g of %.4g), bubble %.4g s (%.1f%%), optimizer %.4g s\n",
              e.compute_s, e.exposed_comm_s(), e.tp_comm_s, e.p2p_s, e.dp_exposed_s, e.dp_comm_s,
              e.bubble_s, 100 * e.bubble, e.optimizer_s);
  // Each class's bytes at its line rate: a floor no algorithm beats.
  std::string links;
  for (const auto& [k, v] : e.comm_bytes) {
    links += (links.empty() ? "" : ", ") + k + " " + bytes_text(v);
    for (const plan::LinkClass* l : {&c.intra_host, &c.inter_host})
      if (l->name == k) {
        char buf[48];
        std::snprintf(buf, sizeof buf, " (>= %.3g s at line rate)", v * l->cost.beta_s_per_b);
        links += buf;
        break;
      }
  }
  std::printf("   bytes per device per step: %s\n", links.empty() ? "none" : links.c_str());
}

}  // namespace

int plan_main(int argc, char** argv) {
  CLI::App app{"braid plan: the fastest layouts of a model on a cluster (docs/PLAN.md)"};
  std::string model_spec, cluster_name = "this-machine", schedule, recompute;
  int devices = 0, top = 5;
  int64_t batch = 0;
  std::optional<int> tp, pp, dp, mbs, vstages, zero;
  bool json_out = false, show_cluster = false;
  app.add_option("--model", model_spec,
                 "gpt:layers=L,hidden=H,heads=A,seq=S,vocab=V[,mlp=R] | mlp:784,256,10 | "
                 "dlrm:tables=..,rows=..,dim=.. | gpt-18b, gpt-175b, gpt-530b, gpt-1t | a file "
                 "holding one of these");
  app.add_option("--cluster", cluster_name,
                 "dgx-a100, dgx-h100, eth-cpu, this-machine, or a cluster file (JSON)");
  app.add_option("--gpus,--devices", devices, "devices to plan for");
  app.add_option("--batch", batch, "global batch, in samples (sequences for a GPT)");
  app.add_option("--tp", tp, "fix tensor-parallel size");
  app.add_option("--pp", pp, "fix pipeline-parallel size");
  app.add_option("--dp", dp, "fix data-parallel size");
  app.add_option("--mbs", mbs, "fix samples per micro-batch");
  app.add_option("--schedule", schedule, "fix the pipeline schedule: gpipe, 1f1b, interleaved");
  app.add_option("--virtual-stages", vstages, "fix chunks per pipeline rank (interleaved >= 2)");
  app.add_option("--recompute", recompute, "fix recomputation: none, selective, full");
  bool sp_on = false, sp_off = false;
  app.add_flag("--sequence-parallel", sp_on, "fix sequence parallelism on");
  app.add_flag("--no-sequence-parallel", sp_off, "fix sequence parallelism off");
  app.add_option("--zero", zero, "fix the ZeRO stage (0-3)");
  app.add_option("--top", top, "layouts to print (default 5)");
  app.add_flag("--json", json_out, "one JSON object per layout, best first");
  app.add_flag("--show-cluster", show_cluster, "print the cluster as a cluster file and exit");
  // The simulator (plan_sim_cmd.h).
  bool simulate = false;
  SimCollectiveArgs sim;
  std::string sim_bytes, sim_chunk;
  app.add_flag("--simulate", simulate,
               "replay the shown layouts' pipeline and dp collectives on the simulator");
  app.add_option("--simulate-collective", sim.collective,
                 "simulate one collective (all_reduce, broadcast, reduce, all_gather, "
                 "reduce_scatter) with --algo, --ranks, --bytes");
  app.add_option("--algo", sim.algo, "the registry algorithm to simulate (default: auto)");
  app.add_option("--ranks", sim.ranks, "ranks of the simulated collective");
  app.add_option("--bytes", sim_bytes, "its size (64M, 1G, ...)");
  app.add_option("--stride", sim.stride, "devices between its members (default 1)");
  app.add_option("--groups", sim.groups, "groups running it at once (default 1)");
  app.add_option("--group-stride", sim.group_stride,
                 "devices between the groups' first members (default 1)");
  app.add_option("--chunk-bytes", sim_chunk, "the pipelining chunk (default 1M)");
  app.add_option("--trace", sim.trace_path, "write the simulated run's Chrome trace (JSON) here");
  CLI11_PARSE(app, argc, argv);

  // This machine's GEMM curve, measured once and kept, as a job's first
  // communicator probes its links (stderr: --json stays one object a line).
  if (cluster_name == "this-machine") {
    const std::string did = plan::keep_device_probe_if_missing();
    if (!did.empty()) std::fprintf(stderr, "braid plan: this-machine: %s\n", did.c_str());
  }
  const plan::Cluster cluster = plan::load_cluster(cluster_name);
  if (show_cluster) {
    std::printf("%s\n", plan::cluster_json(cluster).c_str());
    return 0;
  }
  if (!sim.collective.empty()) {
    if (!sim_bytes.empty()) sim.bytes = parse_size(sim_bytes, "--bytes");
    if (!sim_chunk.empty()) sim.chunk_bytes = parse_size(sim_chunk, "--chunk-bytes");
    sim.json = json_out;
    return simulate_collective_main(cluster, sim);
  }
  if (model_spec.empty() || devices < 1 || batch < 1)
    throw Error(Errc::kInvalidArgument, "needs --model, --gpus N (>= 1) and --batch B (>= 1)");
  const plan::ModelDesc model = plan::load_model(model_spec);
  plan::SearchSpec spec;
  spec.devices = devices;
  spec.batch = batch;
  spec.tp = tp;
  spec.pp = pp;
  spec.dp = dp;
  spec.mbs = mbs;
  spec.virtual_stages = vstages;
  spec.zero = zero;
  if (sp_on && sp_off)
    throw Error(Errc::kInvalidArgument, "--sequence-parallel and --no-sequence-parallel");
  if (sp_on || sp_off) spec.sequence_parallel = sp_on;
  if (!schedule.empty()) spec.schedule = schedule;
  if (!recompute.empty()) spec.recompute = plan::parse_recompute(recompute);

  const auto t0 = std::chrono::steady_clock::now();
  const plan::SearchResult r = plan::search(model, cluster, spec);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (r.fits.empty()) {
    std::string why = "no layout fits: " + std::to_string(r.considered) + " considered";
    if (r.too_big > 0)
      why += ", the smallest needs " + gib(r.smallest_overflow_bytes) + " per device (a " +
             cluster.device.name + " has " + gib(cluster.device.memory_bytes) + ")";
    else
      why += " (the fixed choices leave no valid layout)";
    throw Error(Errc::kInvalidArgument, why);
  }
  const int shown = std::min<int>(top, int(r.fits.size()));
  if (json_out) {
    for (int i = 0; i < shown; ++i) {
      json j = estimate_json(r.fits[size_t(i)], i + 1);
      if (i == 0 && r.fits.size() > 1) j["why"] = plan::why_wins(r.fits[0], r.fits[1]);
      std::printf("%s\n", j.dump().c_str());
    }
    if (simulate)
      simulate_layouts(cluster, {r.fits.begin(), r.fits.begin() + shown}, sim.trace_path, true);
    return 0;
  }
  std::printf("braid plan: %s (%.4g B parameters) on %d x %s (%s), batch %lld (%.4g M tokens)\n",
              model.spec.c_str(), model.params() / 1e9, devices, cluster.device.name.c_str(),
              cluster.name.c_str(), static_cast<long long>(batch),
              double(batch) * model.tokens_per_sample / 1e6);
  std::printf("gradients of all parameters: %s a step in %s\n",
              bytes_text(model.params() * cluster.device.element_bytes()).c_str(),
              cluster.device.dtype.c_str());
  std::printf("%zu layouts estimated in %.2f s; %zu fit in %s per device\n\n", r.considered, took,
              r.fits.size(), gib(cluster.device.memory_bytes).c_str());
  for (int i = 0; i < shown; ++i) print_text(r.fits[size_t(i)], i + 1, cluster);
  const plan::Estimate& best = r.fits[0];
  std::printf("\nwhy #1: its largest term is %s", plan::dominant_term(best).c_str());
  if (r.fits.size() > 1) std::printf("; it is %s", plan::why_wins(best, r.fits[1]).c_str());
  std::printf("\n");
  if (simulate)
    simulate_layouts(cluster, {r.fits.begin(), r.fits.begin() + shown}, sim.trace_path, false);
  return 0;
}

}  // namespace braid::tool
