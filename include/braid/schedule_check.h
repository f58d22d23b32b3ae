// check_schedule: plays the ranks' action lists of a Schedule (schedule.h)
// against each other before it may run, and reports its bubble and peak
// live activations; format_timeline draws the simulated run.
//
// Blocking model of the checker. braid's send completes once its bytes sit
// in the peer's receive ring (four slots over shared memory) or socket
// buffer, so small messages are buffered and large ones (an activation of
// any real size) wait for their receive. The checker therefore assumes, by
// default, that a send blocks until its receive is posted (rendezvous,
// CheckOptions::send_slots = 0): a schedule that passes under rendezvous
// passes under any buffering, since buffering only lets a send finish
// sooner. Messages between two ranks are matched in posting order and
// their tags must agree, as braid's are.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "braid/schedule.h"

namespace braid::parallel {

// Cost of one micro-batch through ALL of a rank's layers; a chunk's action
// costs 1/chunks of it, so schedules with different chunks compare fairly.
struct ScheduleCosts {
  double forward = 1.0;
  double backward = 2.0;
  double transfer = 0.0;  // per communication action
  // [virtual stage] each stage's share of the model's cost, relative (e.g.
  // the summed module costs partition_layers cut it by): a compute action
  // of stage v costs forward (or backward) / chunks × weight[v] / mean
  // weight. Empty: every stage weighs the same.
  std::vector<double> stage_weight;
};

struct CheckOptions {
  ScheduleCosts costs;
  // Messages a channel holds before a send waits for its receive (0:
  // rendezvous, the default; see the top of this file).
  int send_slots = 0;
};

struct ActionTime {
  double start = 0, end = 0;
};

struct ScheduleReport {
  double makespan = 0;
  // 1 − Σ busy / (ranks × makespan): the fraction of rank-time idle.
  double bubble = 0;
  std::vector<double> busy;                // [rank] compute time
  std::vector<int> peak_live;              // [rank] most (micro-batch, chunk)
                                           // forwards awaiting their backward
  std::vector<std::vector<ActionTime>> times;  // [rank][action]
};

// Proves `s`: every action well formed; on each rank every owned (micro-
// batch, chunk) has one forward and, after it, one backward; each compute's
// input was received before it and each send follows the compute that made
// it; every send has its receive with the same tag in posting order; and
// playing all lists together under the blocking model reaches every end
// (no deadlock). Returns the simulated timing. Throws
// Error(kInvalidArgument) "schedule 'NAME' rejected: rank R, action I (TEXT):
// why" — for a deadlock, every blocked rank with its action and what it
// waits for. Cost: O(total actions × ranks).
ScheduleReport check_schedule(const Schedule& s, const CheckOptions& opt = {});

// A schedule whose lists are proven once and then played under many costs
// (the planner plays one schedule with every candidate layout's stage
// times). Each play reports what check_schedule would with the same
// options (`times` left empty unless `with_times`), and throws as it does
// on a deadlock or a tag mismatch; the proof of the lists and the pairing
// of messages are not redone. `s` must outlive the replay. play() may be
// called from several threads at once.
class ScheduleReplay {
 public:
  explicit ScheduleReplay(const Schedule& s);  // proves its lists, as check_schedule does
  ~ScheduleReplay();
  ScheduleReplay(ScheduleReplay&&) noexcept;
  ScheduleReport play(const CheckOptions& opt, bool with_times = true) const;

  struct Plan;  // the messages' pairing (checker_play.cc)

 private:
  std::unique_ptr<const Plan> plan_;
};

// One row per rank over simulated time (a column per forward-chunk cost):
// "F3", "B3" (with a chunk letter a, b, … when chunks > 1), "." idle; then
// the bubble fraction and each rank's peak live activations.
std::string format_timeline(const Schedule& s, const ScheduleReport& r);

}  // namespace braid::parallel
