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
  // With `load` > 0 (run_pipeline): the same play on time-shared cores
  // (below); else 0.
  double shared_makespan = 0;
  double bubble = 0;             // 1 − busy / (ranks × makespan)
  std::vector<double> busy;      // [rank] compute seconds
  std::vector<int> peak_live;    // [rank] live (micro-batch, chunk) forwards
};

// `forward[v]` / `backward[v]`: seconds of one micro-batch through virtual
// stage v (pp·chunks of them, stage v on rank v % pp), each on a core of
// its own; `transfer`: seconds of one communication action. Results are
// cached by their inputs.
//
// `load` > 0: the ranks time-share their host's cores, and each rank
// computing makes `load` cores' worth of demand (the host's ranks per
// core ÷ pp: every tp and dp replica of the stage computes at the same
// moment). The play's timeline is then stretched where it asks more of
// the cores than there are: a stretch of time in which k ranks compute
// lasts max(1, k · load) times as long (fair sharing of the cores among
// the ranks computing; a rank waiting in the bubble leaves its core to
// the others). shared_makespan is that length: at least the play's
// makespan and at least the ranks' total work over the cores.
PipelineRun run_pipeline(const std::string& schedule, int pp, int micro_batches, int chunks,
                         const std::vector<double>& forward, const std::vector<double>& backward,
                         double transfer, bool extrapolate = true, double load = 0);

}  // namespace braid::plan
