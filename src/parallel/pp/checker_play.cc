// The checker, part two: plays all ranks' lists together under the
// blocking model of pipeline.h, with simulated time.
//
// Each rank runs its actions in order. A compute action takes its cost. A
// communication action posts all its transfers at once and ends when each
// has: a receive when the matching send is posted, a send when its receive
// is posted or (send_slots > 0) when it fits the channel's slots — the
// receive of the message send_slots earlier on the channel has happened.
// The j-th send on a channel (src → dst) meets the j-th receive there
// (braid's posting-order matching); their tags must agree. Times obey
// max-plus equations, so the order in which ranks are advanced here does
// not change them. When no rank can move and some have not finished, the
// schedule deadlocks: every blocked rank is named with what it waits for.
#include <algorithm>
#include <cmath>
#include <limits>

#include "braid/error.h"
#include "parallel/pp/checker_detail.h"

namespace braid::parallel {
namespace {

constexpr double kUnset = std::numeric_limits<double>::quiet_NaN();

}  // namespace

// What a play needs of a schedule, built once: every transfer of every
// action is one end of one message, numbered in (rank, action, transfer)
// order; each end knows its channel (src → dst), its place j there, and the
// other end of its message (the j-th of the other side, -1 when there is
// none).
struct ScheduleReplay::Plan {
  struct End {
    int rank = -1, action = -1;
    uint32_t tag = 0;
    const Transfer* t = nullptr;
    int chan = -1;   // src · ranks + dst
    int j = -1;      // its place among the channel's sends (or receives)
    int other = -1;  // the message's other end
  };
  explicit Plan(const Schedule& sched) : s(sched), p(sched.ranks) {
    std::vector<std::vector<int>> sends(size_t(p * p)), recvs(size_t(p * p));
    first.resize(size_t(p));
    for (int r = 0; r < p; ++r) {
      const auto& list = s.actions[size_t(r)];
      first[size_t(r)].resize(list.size());
      for (int i = 0; i < int(list.size()); ++i) {
        first[size_t(r)][size_t(i)] = int(ends.size());
        for (const Transfer& t : list[size_t(i)].transfers) {
          End e;
          e.rank = r;
          e.action = i;
          e.tag = transfer_tag(s, t);
          e.t = &t;
          e.chan = t.send ? r * p + t.peer : t.peer * p + r;
          auto& side = (t.send ? sends : recvs)[size_t(e.chan)];
          e.j = int(side.size());
          side.push_back(int(ends.size()));
          ends.push_back(e);
        }
      }
    }
    for (End& e : ends) {
      const auto& other = (e.t->send ? recvs : sends)[size_t(e.chan)];
      e.other = e.j < int(other.size()) ? other[size_t(e.j)] : -1;
    }
    recv_of_chan = std::move(recvs);
  }
  const Schedule& s;
  const int p;
  std::vector<End> ends;
  std::vector<std::vector<int>> first;         // [rank][action]: its first transfer's end
  std::vector<std::vector<int>> recv_of_chan;  // [channel]: its receives' ends, in order
};

namespace {

using Plan = ScheduleReplay::Plan;

// One play of a plan under one set of costs.
class Player {
 public:
  Player(const Plan& plan, const CheckOptions& o)
      : pl_(plan), s_(plan.s), o_(o), p_(plan.p), posted_(plan.ends.size(), kUnset),
        done_(plan.ends.size(), kUnset) {
    const auto& w = o.costs.stage_weight;
    weight_.assign(size_t(s_.stages()), 1.0);
    double mean = 0;
    for (double x : w) mean += x / double(w.size());
    for (size_t v = 0; v < w.size(); ++v) weight_[v] = w[v] / mean;
  }

  ScheduleReport play(bool with_times) {
    ScheduleReport rep;
    rep.busy.assign(size_t(p_), 0);
    rep.peak_live.assign(size_t(p_), 0);
    if (with_times) {
      rep.times.resize(size_t(p_));
      for (int r = 0; r < p_; ++r) rep.times[size_t(r)].resize(s_.actions[size_t(r)].size());
    }
    pc_.assign(size_t(p_), 0);
    clock_.assign(size_t(p_), 0);
    live_.assign(size_t(p_), 0);
    for (bool moved = true; moved;) {
      moved = false;
      for (int r = 0; r < p_; ++r)
        while (pc_[size_t(r)] < s_.actions[size_t(r)].size() && advance(r, rep, with_times))
          moved = true;
    }
    for (int r = 0; r < p_; ++r)
      if (!finished(r)) deadlock();
    for (int r = 0; r < p_; ++r) rep.makespan = std::max(rep.makespan, clock_[size_t(r)]);
    double busy = 0;
    for (double b : rep.busy) busy += b;
    rep.bubble = rep.makespan > 0 ? 1.0 - busy / (double(p_) * rep.makespan) : 0.0;
    return rep;
  }

 private:
  bool finished(int r) const { return pc_[size_t(r)] == s_.actions[size_t(r)].size(); }
  int end_of(int r, int i, size_t k) const { return pl_.first[size_t(r)][size_t(i)] + int(k); }
  double posted(int e) const { return e < 0 ? kUnset : posted_[size_t(e)]; }

  // When send end `e` can end, or NaN while it cannot.
  double send_end(int e) const {
    const Plan::End& me = pl_.ends[size_t(e)];
    const double peer = posted(me.other);
    double end = std::isnan(peer) ? kUnset : std::max(posted_[size_t(e)], peer);
    const int slots = std::max(o_.send_slots, 0);
    if (slots > 0) {
      double buffered = me.j < slots ? posted_[size_t(e)] : kUnset;
      if (me.j >= slots) {
        const auto& recvs = pl_.recv_of_chan[size_t(me.chan)];
        const size_t back = size_t(me.j - slots);
        if (back < recvs.size() && !std::isnan(done_[size_t(recvs[back])]))
          buffered = std::max(posted_[size_t(e)], done_[size_t(recvs[back])]);
      }
      if (!std::isnan(buffered)) end = std::isnan(end) ? buffered : std::min(end, buffered);
    }
    return end;
  }

  bool advance(int r, ScheduleReport& rep, bool with_times) {
    const int i = int(pc_[size_t(r)]);
    const Action& a = s_.actions[size_t(r)][size_t(i)];
    double& now = clock_[size_t(r)];
    const double start = now;
    if (a.kind == ActionKind::kForward || a.kind == ActionKind::kBackward) {
      const bool fwd = a.kind == ActionKind::kForward;
      const double cost = (fwd ? o_.costs.forward : o_.costs.backward) / s_.chunks *
                          weight_[size_t(s_.stage_of(r, a.chunk))];
      now += cost;
      rep.busy[size_t(r)] += cost;
      live_[size_t(r)] += fwd ? 1 : -1;
      rep.peak_live[size_t(r)] = std::max(rep.peak_live[size_t(r)], live_[size_t(r)]);
    } else if (a.kind == ActionKind::kComm) {
      for (size_t k = 0; k < a.transfers.size(); ++k)
        if (std::isnan(posted_[size_t(end_of(r, i, k))])) post(end_of(r, i, k), now);
      double end = now;
      for (size_t k = 0; k < a.transfers.size(); ++k) {
        const int e = end_of(r, i, k);
        double t;
        if (a.transfers[k].send) {
          t = send_end(e);
        } else {
          const double sender = posted(pl_.ends[size_t(e)].other);
          t = std::isnan(sender) ? kUnset : std::max(posted_[size_t(e)], sender);
        }
        if (std::isnan(t)) return false;
        end = std::max(end, t);
      }
      end += o_.costs.transfer;
      for (size_t k = 0; k < a.transfers.size(); ++k) done_[size_t(end_of(r, i, k))] = end;
      now = end;
    }
    if (with_times) rep.times[size_t(r)][size_t(i)] = {start, now};
    ++pc_[size_t(r)];
    return true;
  }

  void post(int e, double now) {
    posted_[size_t(e)] = now;
    const Plan::End& me = pl_.ends[size_t(e)];
    if (me.other < 0 || std::isnan(posted_[size_t(me.other)])) return;
    const Plan::End& peer = pl_.ends[size_t(me.other)];
    if (peer.tag == me.tag) return;
    const Plan::End& rx = me.t->send ? peer : me;
    const Plan::End& tx = me.t->send ? me : peer;
    pp_detail::reject(s_, rx.rank, rx.action,
                      pp_detail::transfer_text(s_, *rx.t) + " would receive rank " +
                          std::to_string(tx.rank) + "'s action " + std::to_string(tx.action) + " (" +
                          pp_detail::transfer_text(s_, *tx.t) +
                          "): messages between two ranks are matched in posting order");
  }

  std::string where(int r) const {
    if (finished(r)) return "rank " + std::to_string(r) + " has finished";
    const int i = int(pc_[size_t(r)]);
    return "rank " + std::to_string(r) + " is at action " + std::to_string(i) + " (" +
           action_text(s_, s_.actions[size_t(r)][size_t(i)]) + ")";
  }

  [[noreturn]] void deadlock() const {
    std::string msg = "deadlock under blocking sends (send_slots " +
                      std::to_string(o_.send_slots) + "):";
    for (int r = 0; r < p_; ++r) {
      if (finished(r)) continue;
      const int i = int(pc_[size_t(r)]);
      const Action& a = s_.actions[size_t(r)][size_t(i)];
      msg += " rank " + std::to_string(r) + " blocks at action " + std::to_string(i) + " (" +
             action_text(s_, a) + ")";
      for (size_t k = 0; k < a.transfers.size(); ++k) {
        const Transfer& t = a.transfers[k];
        const int e = end_of(r, i, k);
        const bool open =
            t.send ? std::isnan(send_end(e)) : std::isnan(posted(pl_.ends[size_t(e)].other));
        if (!open) continue;
        msg += std::string(", waiting for rank ") + std::to_string(t.peer) + " to " +
               (t.send ? "receive" : "send") + " " + (t.what == Payload::kActivation ? "act" : "grad") +
               " m" + std::to_string(t.mb) + " s" + std::to_string(t.stage) + " (" + where(t.peer) + ")";
        break;
      }
      msg += ";";
    }
    msg.pop_back();
    throw Error(Errc::kInvalidArgument, "schedule '" + s_.name + "' rejected: " + msg);
  }

  const Plan& pl_;
  const Schedule& s_;
  const CheckOptions& o_;
  const int p_;
  std::vector<double> posted_, done_;  // [end]
  std::vector<size_t> pc_;
  std::vector<double> clock_;
  std::vector<int> live_;
  std::vector<double> weight_;  // [stage] costs.stage_weight over its mean (1 when empty)
};

void check_options(const Schedule& s, const CheckOptions& opt) {
  BRAID_CHECK_ARG(opt.costs.forward >= 0 && opt.costs.backward >= 0 && opt.costs.transfer >= 0 &&
                      opt.send_slots >= 0,
                  "check_schedule: costs and send_slots must be ≥ 0");
  const auto& w = opt.costs.stage_weight;
  double sum = 0;
  for (double x : w) sum += x;
  BRAID_CHECK_ARG(w.empty() || (int(w.size()) == s.stages() && sum > 0 &&
                                std::all_of(w.begin(), w.end(), [](double x) { return x >= 0; })),
                  "check_schedule: " + std::to_string(w.size()) + " stage weights for " +
                      std::to_string(s.stages()) +
                      " stages (want one per stage, ≥ 0, not all 0; or none)");
}

}  // namespace

ScheduleReplay::ScheduleReplay(const Schedule& s) {
  pp_detail::check_lists(s);
  plan_ = std::make_unique<const Plan>(s);
}

ScheduleReplay::~ScheduleReplay() = default;
ScheduleReplay::ScheduleReplay(ScheduleReplay&&) noexcept = default;

ScheduleReport ScheduleReplay::play(const CheckOptions& opt, bool with_times) const {
  check_options(plan_->s, opt);
  return Player(*plan_, opt).play(with_times);
}

ScheduleReport check_schedule(const Schedule& s, const CheckOptions& opt) {
  return ScheduleReplay(s).play(opt);
}

}  // namespace braid::parallel
