#include "plan/cost/pipeline.h"

#include <algorithm>
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
const Made& schedule_of(const std::string& name, int pp, int m, int chunks) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<Made>> made;
  const std::string key =
      name + "/" + std::to_string(pp) + "/" + std::to_string(m) + "/" + std::to_string(chunks);
  std::lock_guard<std::mutex> l(mu);
  std::unique_ptr<Made>& s = made[key];
  if (!s) s = std::make_unique<Made>(parallel::make_schedule(name, pp, m, chunks));
  return *s;
}

// The timeline of a play stretched where more ranks compute than the
// cores hold (run_pipeline's `load`): a sweep over the compute actions'
// starts and ends.
double stretched(const parallel::Schedule& s, const parallel::ScheduleReport& r, double load) {
  std::vector<std::pair<double, int>> edges;  // (time, +1 start / −1 end)
  for (size_t k = 0; k < r.times.size(); ++k)
    for (size_t i = 0; i < r.times[k].size(); ++i) {
      if (s.actions[k][i].kind != parallel::ActionKind::kForward &&
          s.actions[k][i].kind != parallel::ActionKind::kBackward)
        continue;
      const parallel::ActionTime& t = r.times[k][i];
      if (t.end > t.start) {
        edges.emplace_back(t.start, +1);
        edges.emplace_back(t.end, -1);
      }
    }
  std::sort(edges.begin(), edges.end());
  double total = 0, last = 0;
  int computing = 0;
  for (const auto& [t, d] : edges) {
    total += (t - last) * std::max(1.0, computing * load);
    last = t;
    computing += d;
  }
  return total + (r.makespan - last);
}

// One play of the checker. The checker weighs a stage's forward and
// backward alike (ScheduleCosts::stage_weight), so a stage's weight is its
// forward plus backward and the ratio backward / forward is the mean one.
PipelineRun play(const std::string& schedule, int pp, int m, int chunks,
                 const std::vector<double>& fwd, const std::vector<double>& bwd, double transfer,
                 double load) {
  const Made& made = schedule_of(schedule, pp, m, chunks);
  const parallel::ScheduleReplay& s = made.replay;
  parallel::CheckOptions o;
  const double F = std::accumulate(fwd.begin(), fwd.end(), 0.0);
  const double B = std::accumulate(bwd.begin(), bwd.end(), 0.0);
  o.costs.forward = F / pp;
  o.costs.backward = B / pp;
  o.costs.transfer = transfer;
  for (size_t v = 0; v < fwd.size(); ++v) o.costs.stage_weight.push_back(fwd[v] + bwd[v]);
  const parallel::ScheduleReport r = s.play(o, load > 0);
  PipelineRun out;
  out.makespan = r.makespan;
  if (load > 0) out.shared_makespan = stretched(made.schedule, r, load);
  out.bubble = r.bubble;
  out.busy = r.busy;
  out.peak_live = r.peak_live;
  return out;
}

std::string key_of(const std::string& schedule, int pp, int m, int chunks,
                   const std::vector<double>& fwd, const std::vector<double>& bwd, double transfer,
                   bool extrapolate, double load) {
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
  add(load);
  return k;
}

}  // namespace

PipelineRun run_pipeline(const std::string& schedule, int pp, int m, int chunks,
                         const std::vector<double>& fwd, const std::vector<double>& bwd,
                         double transfer, bool extrapolate, double load) {
  if (pp == 1 && chunks == 1) {
    // One stage: micro-batches run back to back, one live at a time.
    PipelineRun r;
    r.makespan = m * (fwd[0] + bwd[0]);
    if (load > 0) r.shared_makespan = r.makespan * std::max(1.0, load);
    r.busy = {r.makespan};
    r.peak_live = {1};
    return r;
  }
  static std::mutex mu;
  static std::map<std::string, PipelineRun> cache;
  const std::string key = key_of(schedule, pp, m, chunks, fwd, bwd, transfer, extrapolate, load);
  {
    std::lock_guard<std::mutex> l(mu);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  PipelineRun r;
  const int m1 = 2 * pp, m2 = 3 * pp;
  if (!extrapolate || m <= 4 * pp) {
    r = play(schedule, pp, m, chunks, fwd, bwd, transfer, load);
  } else {
    const PipelineRun a = play(schedule, pp, m1, chunks, fwd, bwd, transfer, load);
    const PipelineRun b = play(schedule, pp, m2, chunks, fwd, bwd, transfer, load);
    const double t = double(m - m1) / double(m2 - m1);
    r.makespan = a.makespan + t * (b.makespan - a.makespan);
    r.shared_makespan = a.shared_makespan + t * (b.shared_makespan - a.shared_makespan);
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
