// The pipeline term of a step: braid's real schedule (parallel::
// make_schedule) played by its checker (parallel::check_schedule) with the
// planner's per-stage times. Long schedules are played at two lengths and
// extended along the line through them (steady state: each further
// multiple of pp micro-batches adds the same time and live activations);
// tests/plan/cost_test.cc checks the line against full plays.
#pragma once

#include <string>
#include <vector>

namespace braid::plan {

struct PipelineRun {
  double makespan = 0;           // seconds
  double bubble = 0;             // 1 − busy / (ranks × makespan)
  std::vector<double> busy;      // [rank] compute seconds
  std::vector<int> peak_live;    // [rank] live (micro-batch, chunk) forwards
};

// `forward[v]` / `backward[v]`: seconds of one micro-batch through virtual
// stage v (pp·chunks of them, stage v on rank v % pp); `transfer`: seconds
// of one communication action. Results are cached by their inputs.
PipelineRun run_pipeline(const std::string& schedule, int pp, int micro_batches, int chunks,
                         const std::vector<double>& forward, const std::vector<double>& backward,
                         double transfer, bool extrapolate = true);

}  // namespace braid::plan
