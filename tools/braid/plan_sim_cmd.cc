// braid plan --simulate-collective / --simulate (plan_sim_cmd.h).
#include "plan_sim_cmd.h"

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "braid/error.h"
#include "braid/plan_sim.h"
#include "braid/schedule.h"
#include "braid/tuning.h"
#include "sizes.h"

namespace braid::tool {
namespace {

using nlohmann::json;

std::string secs(double s) {
  char b[32];
  if (s >= 1) std::snprintf(b, sizeof b, "%.4g s", s);
  else if (s >= 1e-3) std::snprintf(b, sizeof b, "%.4g ms", s * 1e3);
  else std::snprintf(b, sizeof b, "%.4g us", s * 1e6);
  return b;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  if (!f) throw Error(Errc::kIo, "--trace: cannot write " + path);
  f << text;
}

}  // namespace

int simulate_collective_main(const plan::Cluster& c, const SimCollectiveArgs& a) {
  if (a.ranks < 1) throw Error(Errc::kInvalidArgument, "--simulate-collective needs --ranks N (>= 1)");
  if (a.bytes == 0) throw Error(Errc::kInvalidArgument, "--simulate-collective needs --bytes SIZE");
  std::string algo = a.algo;
  const comm::GroupLinks links = plan::place_group(c, a.ranks, a.stride).links;
  if (algo == "auto") algo = comm::price_collective(a.collective, a.bytes, links).algorithm;
  plan::SimOptions o;
  o.chunk_bytes = a.chunk_bytes;
  o.stride = a.stride;
  o.groups = a.groups;
  o.group_stride = a.group_stride;
  o.trace = !a.trace_path.empty();
  const plan::SimResult r = plan::simulate_collective(c, a.collective, algo, a.bytes, a.ranks, o);
  const double closed =
      plan::closed_form_seconds(c, a.collective, algo, a.bytes, a.ranks, a.stride, o.chunk_bytes);
  if (o.trace) write_file(a.trace_path, r.trace_json);
  if (a.json) {
    json j = {{"collective", a.collective}, {"algorithm", algo},       {"ranks", a.ranks},
              {"bytes", a.bytes},           {"cluster", c.name},      {"stride", a.stride},
              {"groups", a.groups},         {"simulated_s", r.seconds}, {"closed_form_s", closed},
              {"ratio", closed > 0 ? r.seconds / closed : 1.0}, {"messages", r.messages}, {"bytes_by_link", r.bytes_by_link},
              {"waited_s", r.waited_s},     {"byte_scale", r.byte_scale}, {"wall_s", r.wall_s}};
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("%s '%s' of %s on %d ranks of %s (%s)%s\n", a.collective.c_str(), algo.c_str(),
              format_size(double(a.bytes)).c_str(), a.ranks, c.name.c_str(), c.device.name.c_str(),
              a.groups > 1 ? (", " + std::to_string(a.groups) + " groups at once").c_str() : "");
  std::printf("  simulated    %s  (%llu messages; ", secs(r.seconds).c_str(),
              static_cast<unsigned long long>(r.messages));
  for (const auto& [k, v] : r.bytes_by_link)
    if (v > 0) std::printf("%s %s, ", k.c_str(), format_size(v).c_str());
  std::printf("queued behind busy links %s in all (pipelined chunks behind their own); ran in %.2f s)\n", secs(r.waited_s).c_str(), r.wall_s);
  std::printf("  closed form  %s  (the registry's formula, as the planner prices it)\n",
              secs(closed).c_str());
  if (closed > 0) std::printf("  simulated / closed form = %.3f\n", r.seconds / closed);
  if (o.trace)
    std::printf("  trace: %s (%s)\n", a.trace_path.c_str(),
                r.trace_dropped ? (std::to_string(r.trace_dropped) + " events dropped").c_str()
                                : "chrome://tracing or ui.perfetto.dev");
  return 0;
}

void simulate_layouts(const plan::Cluster& c, const std::vector<plan::Estimate>& shown,
                      const std::string& trace_path, bool json_out) {
  if (!json_out) std::printf("\nsimulated (braid's real schedules and collectives, plan_sim.h):\n");
  if (!trace_path.empty() && !shown.empty() && shown[0].layout.pp == 1)
    std::fprintf(stderr, "--trace: the first layout has no pipeline; no trace written\n");
  for (size_t i = 0; i < shown.size(); ++i) {
    const plan::Estimate& e = shown[i];
    const plan::Layout& l = e.layout;
    json j = {{"rank", i + 1}};
    if (!json_out) std::printf("#%zu %s\n", i + 1, plan::layout_text(l).c_str());
    if (l.pp > 1) {
      const parallel::Schedule s =
          parallel::make_schedule(l.schedule, l.pp, e.micro_batches, l.virtual_stages);
      const plan::PipelineSimResult p = plan::simulate_pipeline(
          c, s, e.stage_forward_s, e.stage_backward_s, e.transfer_bytes, l.tp,
          i == 0 && !trace_path.empty());
      if (i == 0 && !trace_path.empty()) write_file(trace_path, p.trace_json);
      j["pipeline"] = {{"closed_form_s", e.pipeline_s}, {"simulated_s", p.makespan},
                       {"ratio", p.makespan / e.pipeline_s}, {"simulated_bubble", p.bubble}};
      if (!json_out)
        std::printf("   pipeline  planner %s, simulated %s (x%.3f), bubble %.1f%% vs %.1f%%\n",
                    secs(e.pipeline_s).c_str(), secs(p.makespan).c_str(), p.makespan / e.pipeline_s,
                    100 * e.bubble, 100 * p.bubble);
    }
    // Every collective the estimate priced, all its groups at once.
    const int devices = l.tp * l.pp * l.dp;
    for (const auto& [what, algo] : e.algorithms) {
      const std::string role = what.substr(0, what.find(' ')), op = what.substr(what.find(' ') + 1);
      if (role != "tp" && role != "dp") continue;  // pp: the pipeline above
      const bool tp = role == "tp";
      const int size = tp ? l.tp : l.dp;
      plan::SimOptions o;
      o.stride = tp ? 1 : l.tp * l.pp;
      o.group_stride = tp ? l.tp : 1;
      o.groups = tp ? devices / l.tp : l.tp * l.pp;
      const auto b = e.call_bytes.find(what);
      if (size <= 1 || b == e.call_bytes.end()) continue;
      const size_t unit = 4 * size_t(size);
      const size_t bytes = std::max(unit, size_t(b->second) / unit * unit);
      // At most 16 chunks a ring segment: a gradient of gigabytes in the
      // runtime's 1 MiB chunks is tens of millions of simulated messages;
      // past 16 the pipeline's fill is a few percent of its time.
      o.chunk_bytes = std::max(o.chunk_bytes, bytes / size_t(size) / 16 / 4 * 4);
      const double closed = plan::closed_form_seconds(c, op, algo, bytes, size, o.stride, o.chunk_bytes);
      try {
        const plan::SimResult r = plan::simulate_collective(c, op, algo, bytes, size, o);
        j[what] = {{"algorithm", algo},         {"bytes", bytes},
                   {"closed_form_s", closed},   {"simulated_s", r.seconds},
                   {"ratio", r.seconds / closed}, {"groups", o.groups},
                   {"chunk_bytes", o.chunk_bytes}};
        if (!json_out)
          std::printf("   %s '%s' of %s, %d groups of %d at once: closed form %s, simulated "
                      "%s (x%.3f)\n",
                      what.c_str(), algo.c_str(), format_size(double(bytes)).c_str(), o.groups,
                      size, secs(closed).c_str(), secs(r.seconds).c_str(), r.seconds / closed);
      } catch (const Error& err) {
        j[what] = {{"algorithm", algo}, {"not_simulated", err.what()}};
        if (!json_out) std::printf("   %s '%s': not simulated: %s\n", what.c_str(), algo.c_str(), err.what());
      }
    }
    if (json_out) std::printf("%s\n", j.dump().c_str());
  }
}

}  // namespace braid::tool
