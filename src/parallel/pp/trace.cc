// Chrome trace of a real pipeline step (chrome://tracing, Perfetto): one
// complete event ("ph": "X") per action, one track (tid) per rank.
#include <algorithm>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "braid/comm.h"
#include "braid/error.h"
#include "braid/pipeline_trace.h"

namespace braid::parallel {

namespace {
const char* category(ActionKind k) {
  switch (k) {
    case ActionKind::kForward: return "forward";
    case ActionKind::kBackward: return "backward";
    case ActionKind::kComm: return "comm";
    case ActionKind::kReduceGrads: return "reduce";
    case ActionKind::kStep: return "step";
  }
  return "?";
}
}  // namespace

std::string chrome_trace_json(const Schedule& s,
                              const std::vector<std::vector<ActionTiming>>& per_rank) {
  BRAID_CHECK_ARG(int(per_rank.size()) == s.ranks,
                  "chrome_trace_json: timings of " + std::to_string(per_rank.size()) +
                      " ranks for a schedule of " + std::to_string(s.ranks));
  double t0 = std::numeric_limits<double>::infinity();
  for (int r = 0; r < s.ranks; ++r) {
    BRAID_CHECK_ARG(per_rank[size_t(r)].size() == s.actions[size_t(r)].size(),
                    "chrome_trace_json: rank " + std::to_string(r) + " has " +
                        std::to_string(per_rank[size_t(r)].size()) + " timings for " +
                        std::to_string(s.actions[size_t(r)].size()) + " actions");
    for (const auto& t : per_rank[size_t(r)]) t0 = std::min(t0, t.start);
  }
  nlohmann::json events = nlohmann::json::array();
  for (int r = 0; r < s.ranks; ++r) {
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", r},
                      {"args", {{"name", "rank " + std::to_string(r)}}}});
    for (size_t i = 0; i < per_rank[size_t(r)].size(); ++i) {
      const Action& a = s.actions[size_t(r)][i];
      const ActionTiming& t = per_rank[size_t(r)][i];
      events.push_back({{"name", action_text(s, a)},
                        {"cat", category(a.kind)},
                        {"ph", "X"},
                        {"pid", 0},
                        {"tid", r},
                        {"ts", (t.start - t0) * 1e6},
                        {"dur", (t.end - t.start) * 1e6},
                        {"args", {{"action", i}}}});
    }
  }
  return nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump();
}

void write_pipeline_trace(Communicator& comm, const Schedule& s,
                          const std::vector<ActionTiming>& mine, const std::string& path) {
  BRAID_CHECK_ARG(comm.size() == s.ranks, "write_pipeline_trace: the communicator has " +
                                              std::to_string(comm.size()) + " ranks, the schedule " +
                                              std::to_string(s.ranks));
  size_t most = 0;
  for (const auto& l : s.actions) most = std::max(most, l.size());
  BRAID_CHECK_ARG(mine.size() == s.actions[size_t(comm.rank())].size(),
                  "write_pipeline_trace: " + std::to_string(mine.size()) + " timings for " +
                      std::to_string(s.actions[size_t(comm.rank())].size()) + " actions");
  std::vector<double> send(2 * most, 0.0), all(send.size() * size_t(s.ranks));
  for (size_t i = 0; i < mine.size(); ++i) {
    send[2 * i] = mine[i].start;
    send[2 * i + 1] = mine[i].end;
  }
  comm.gather(send.data(), all.data(), send.size(), DType::kF64, 0);
  if (comm.rank() != 0) return;
  std::vector<std::vector<ActionTiming>> per_rank(size_t(s.ranks));
  for (int r = 0; r < s.ranks; ++r)
    for (size_t i = 0; i < s.actions[size_t(r)].size(); ++i)
      per_rank[size_t(r)].push_back({all[size_t(r) * 2 * most + 2 * i],
                                     all[size_t(r) * 2 * most + 2 * i + 1]});
  std::ofstream f(path, std::ios::trunc);
  f << chrome_trace_json(s, per_rank) << "\n";
  f.close();
  if (!f) throw Error(Errc::kIo, "write_pipeline_trace: cannot write " + path);
}

}  // namespace braid::parallel
