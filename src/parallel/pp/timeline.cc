// Text views of a schedule: its action lists, and a timeline of its
// simulated run with one row per rank (what --print-schedule shows).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "braid/error.h"
#include "braid/schedule_check.h"

namespace braid::parallel {

std::string format_actions(const Schedule& s) {
  std::string out;
  for (int r = 0; r < s.ranks; ++r) {
    out += "rank " + std::to_string(r) + ":";
    const auto& list = s.actions[size_t(r)];
    for (size_t i = 0; i < list.size(); ++i) out += (i ? " | " : " ") + action_text(s, list[i]);
    out += "\n";
  }
  return out;
}

std::string format_timeline(const Schedule& s, const ScheduleReport& rep) {
  BRAID_CHECK_ARG(int(rep.times.size()) == s.ranks,
                  "format_timeline: the report is not of this schedule");
  // One column per forward of one chunk, the shortest compute; any other
  // action spans its duration in such columns, rounded.
  double unit = 0;
  for (int r = 0; r < s.ranks; ++r)
    for (size_t i = 0; i < s.actions[size_t(r)].size(); ++i) {
      const auto& a = s.actions[size_t(r)][i];
      const double d = rep.times[size_t(r)][i].end - rep.times[size_t(r)][i].start;
      if ((a.kind == ActionKind::kForward || a.kind == ActionKind::kBackward) && d > 0)
        unit = unit == 0 ? d : std::min(unit, d);
    }
  if (unit == 0) unit = 1;
  const size_t cols = size_t(std::lround(rep.makespan / unit));
  auto label = [&](const Action& a) {
    std::string t(1, a.kind == ActionKind::kForward ? 'F' : 'B');
    t += std::to_string(a.mb);
    if (s.chunks > 1) t += char('a' + a.chunk % 26);
    return t;
  };
  size_t width = 2;
  for (const auto& list : s.actions)
    for (const auto& a : list)
      if (a.kind == ActionKind::kForward || a.kind == ActionKind::kBackward)
        width = std::max(width, label(a).size() + 1);
  std::string out = s.name + ": " + std::to_string(s.ranks) + " ranks, " +
                    std::to_string(s.micro_batches) + " micro-batches" +
                    (s.chunks > 1 ? ", " + std::to_string(s.chunks) + " chunks per rank" : "") +
                    "\n";
  for (int r = 0; r < s.ranks; ++r) {
    std::vector<std::string> cell(cols, ".");
    for (size_t i = 0; i < s.actions[size_t(r)].size(); ++i) {
      const auto& a = s.actions[size_t(r)][i];
      if (a.kind != ActionKind::kForward && a.kind != ActionKind::kBackward) continue;
      const size_t b = size_t(std::lround(rep.times[size_t(r)][i].start / unit));
      const size_t e = size_t(std::lround(rep.times[size_t(r)][i].end / unit));
      for (size_t c = b; c < e && c < cols; ++c) cell[c] = label(a);
    }
    out += "rank " + std::to_string(r) + " |";
    for (const auto& c : cell) out += c + std::string(width - c.size(), ' ');
    out += "\n";
  }
  char line[64];
  std::snprintf(line, sizeof line, "bubble %.1f %%", 100.0 * rep.bubble);
  out += line;
  out += ", peak live activations per rank:";
  for (int p : rep.peak_live) {
    out += ' ';
    out += std::to_string(p);
  }
  out += "\n";
  return out;
}

}  // namespace braid::parallel
