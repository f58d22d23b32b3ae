#include "plan/cost/pipeline.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>

#include "braid/schedule.h"
#include "braid/schedule_check.h"

namespace braid::plan {
namespace {

// The schedules played so far, each proven once: one is played with many
// stage times.
struct Made {
  parallel::Schedule schedule;
  parallel::ScheduleReplay replay;
  explicit Made(parallel::Schedule s) : schedule(std::move(s)), replay(schedule) {}
};
const parallel::ScheduleReplay& schedule_of(const std::string& name, int pp, int m, int chunks) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<Made>> made;
  const std::string key =
      name + "/" + std::to_string(pp) + "/" + std::to_string(m) + "/" + std::to_string(chunks);
  std::lock_guard<std::mutex> l(mu);
  std::unique_ptr<Made>& s = made[key];
  if (!s) s = std::make_unique<Made>(parallel::make_schedule(name, pp, m, chunks));
  return s->replay;
}

// One play of the checker. The checker weighs a stage's forward and
// backward alike (ScheduleCosts::stage_weight), so a stage's weight is its
// forward plus backward and the ratio backward / forward is the mean one.
PipelineRun play(const std::string& schedule, int pp, int m, int chunks,
                 const std::vector<double>& fwd, const std::vector<double>& bwd, double transfer) {
  const parallel::ScheduleReplay& s = schedule_of(schedule, pp, m, chunks);
  parallel::CheckOptions o;
  const double F = std::accumulate(fwd.begin(), fwd.end(), 0.0);
  const double B = std::accumulate(bwd.begin(), bwd.end(), 0.0);
  o.costs.forward = F / pp;
  o.costs.backward = B / pp;
  o.costs.transfer = transfer;
  for (size_t v = 0; v < fwd.size(); ++v) o.costs.stage_weight.push_back(fwd[v] + bwd[v]);
  const parallel::ScheduleReport r = s.play(o, false);
  PipelineRun out;
  out.makespan = r.makespan;
  out.bubble = r.bubble;
  out.busy = r.busy;
  out.peak_live = r.peak_live;
  return out;
}

std::string key_of(const std::string& schedule, int pp, int m, int chunks,
                   const std::vector<double>& fwd, const std::vector<double>& bwd, double transfer,
                   bool extrapolate) {
  std::string k = schedule + "/" + std::to_string(pp) + "/" + std::to_string(m) + "/" +
                  std::to_string(chunks) + (extrapolate ? "/x" : "/f");
  char buf[40];
  auto add = [&](double v) {
    std::snprintf(buf, sizeof buf, "/%.9g", v);
    k += buf;
  };
  for (double v : fwd) add(v);
  for (double v : bwd) add(v);
  add(transfer);
  return k;
}

}  // namespace

PipelineRun run_pipeline(const std::string& schedule, int pp, int m, int chunks,
                         const std::vector<double>& fwd, const std::vector<double>& bwd,
                         double transfer, bool extrapolate) {
  if (pp == 1 && chunks == 1) {
    // One stage: micro-batches run back to back, one live at a time.
    PipelineRun r;
    r.makespan = m * (fwd[0] + bwd[0]);
    r.busy = {r.makespan};
    r.peak_live = {1};
    return r;
  }
  static std::mutex mu;
  static std::map<std::string, PipelineRun> cache;
  const std::string key = key_of(schedule, pp, m, chunks, fwd, bwd, transfer, extrapolate);
  {
    std::lock_guard<std::mutex> l(mu);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  PipelineRun r;
  const int m1 = 2 * pp, m2 = 3 * pp;
  if (!extrapolate || m <= 4 * pp) {
    r = play(schedule, pp, m, chunks, fwd, bwd, transfer);
  } else {
    const PipelineRun a = play(schedule, pp, m1, chunks, fwd, bwd, transfer);
    const PipelineRun b = play(schedule, pp, m2, chunks, fwd, bwd, transfer);
    const double t = double(m - m1) / double(m2 - m1);
    r.makespan = a.makespan + t * (b.makespan - a.makespan);
    double busy = 0;
    for (size_t i = 0; i < a.busy.size(); ++i) {
      r.busy.push_back(a.busy[i] * double(m) / m1);
      r.peak_live.push_back(int(std::lround(a.peak_live[i] + t * (b.peak_live[i] - a.peak_live[i]))));
      busy += r.busy.back();
    }
    r.bubble = 1 - busy / (pp * r.makespan);
  }
  std::lock_guard<std::mutex> l(mu);
  if (cache.size() >= 200000) cache.clear();  // a bound for long-lived callers
  cache.emplace(key, r);
  return r;
}

}  // namespace braid::plan
