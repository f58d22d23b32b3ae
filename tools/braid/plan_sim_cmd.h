// braid plan's simulator modes (plan_sim_cmd.cc), on braid/plan_sim.h:
// --simulate-collective plays one collective's real algorithm over a
// simulated cluster; --simulate replays the planned layouts' pipeline and
// data-parallel collectives and prints them beside the closed forms.
#pragma once

#include <string>
#include <vector>

#include "braid/plan_cost.h"

namespace braid::tool {

struct SimCollectiveArgs {
  std::string collective, algo = "auto", trace_path;
  int ranks = 0, stride = 1, groups = 1, group_stride = 1;
  size_t bytes = 0, chunk_bytes = size_t(1) << 20;
  bool json = false;
};
// Prints the simulated time beside the closed form (and the algorithm
// price_collective would pick when algo is "auto"); writes the trace.
int simulate_collective_main(const plan::Cluster& c, const SimCollectiveArgs& a);

// For each estimate: the pipeline (the checker's play vs the simulator's)
// and each tp and dp collective's largest call (closed form vs simulated,
// every group of its kind at once), with the ratios. trace_path: the first layout's
// pipeline timeline.
void simulate_layouts(const plan::Cluster& c, const std::vector<plan::Estimate>& shown,
                      const std::string& trace_path, bool json);

}  // namespace braid::tool
