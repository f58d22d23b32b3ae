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

struct Slot {  // one end of one message
  double posted = kUnset, done = kUnset;
  int rank = -1, action = -1;
  uint32_t tag = 0;
  const Transfer* t = nullptr;
};

struct Channel {
  std::vector<Slot> send, recv;
};

class Player {
 public:
  Player(const Schedule& s, const CheckOptions& o) : s_(s), o_(o), p_(s.ranks) {
    const auto& w = o.costs.stage_weight;
    weight_.assign(size_t(s.stages()), 1.0);
    double mean = 0;
    for (double x : w) mean += x / double(w.size());
    for (size_t v = 0; v < w.size(); ++v) weight_[v] = w[v] / mean;
    chan_.resize(size_t(p_ * p_));
    index_.resize(size_t(p_));
    for (int r = 0; r < p_; ++r) {
      const auto& list = s.actions[size_t(r)];
      index_[size_t(r)].resize(list.size());
      for (int i = 0; i < int(list.size()); ++i)
        for (const Transfer& t : list[size_t(i)].transfers) {
          auto& side = t.send ? ch(r, t.peer).send : ch(t.peer, r).recv;
          index_[size_t(r)][size_t(i)].push_back(side.size());
          Slot sl;
          sl.rank = r;
          sl.action = i;
          sl.tag = transfer_tag(s, t);
          sl.t = &t;
          side.push_back(sl);
        }
    }
  }

  ScheduleReport play() {
    ScheduleReport rep;
    rep.busy.assign(size_t(p_), 0);
    rep.peak_live.assign(size_t(p_), 0);
    rep.times.resize(size_t(p_));
    for (int r = 0; r < p_; ++r) rep.times[size_t(r)].resize(s_.actions[size_t(r)].size());
    pc_.assign(size_t(p_), 0);
    clock_.assign(size_t(p_), 0);
    live_.assign(size_t(p_), 0);
    for (bool moved = true; moved;) {
      moved = false;
      for (int r = 0; r < p_; ++r)
        while (pc_[size_t(r)] < s_.actions[size_t(r)].size() && advance(r, rep)) moved = true;
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
  Channel& ch(int src, int dst) { return chan_[size_t(src * p_ + dst)]; }
  bool finished(int r) const { return pc_[size_t(r)] == s_.actions[size_t(r)].size(); }
  Slot& mine(int r, int i, size_t k) {
    const Transfer& t = s_.actions[size_t(r)][size_t(i)].transfers[k];
    const size_t j = index_[size_t(r)][size_t(i)][k];
    return t.send ? ch(r, t.peer).send[j] : ch(t.peer, r).recv[j];
  }
  Slot& other(int r, int i, size_t k) {
    const Transfer& t = s_.actions[size_t(r)][size_t(i)].transfers[k];
    const size_t j = index_[size_t(r)][size_t(i)][k];
    return t.send ? ch(r, t.peer).recv[j] : ch(t.peer, r).send[j];
  }

  // When send k of action i on rank r can end, or NaN while it cannot.
  double send_end(int r, int i, size_t k) {
    const Transfer& t = s_.actions[size_t(r)][size_t(i)].transfers[k];
    const size_t j = index_[size_t(r)][size_t(i)][k];
    const Slot& me = ch(r, t.peer).send[j];
    const Slot& peer = ch(r, t.peer).recv[j];
    double end = std::isnan(peer.posted) ? kUnset : std::max(me.posted, peer.posted);
    const size_t slots = size_t(std::max(o_.send_slots, 0));
    if (slots > 0) {
      double buffered = j < slots ? me.posted : kUnset;
      if (j >= slots && !std::isnan(ch(r, t.peer).recv[j - slots].done))
        buffered = std::max(me.posted, ch(r, t.peer).recv[j - slots].done);
      if (!std::isnan(buffered)) end = std::isnan(end) ? buffered : std::min(end, buffered);
    }
    return end;
  }

  bool advance(int r, ScheduleReport& rep) {
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
      for (size_t k = 0; k < a.transfers.size(); ++k) {
        Slot& me = mine(r, i, k);
        if (std::isnan(me.posted)) post(r, i, k, now);
      }
      double end = now;
      for (size_t k = 0; k < a.transfers.size(); ++k) {
        const double e = a.transfers[k].send ? send_end(r, i, k) : [&] {
          const Slot& sender = other(r, i, k);
          return std::isnan(sender.posted) ? kUnset : std::max(mine(r, i, k).posted, sender.posted);
        }();
        if (std::isnan(e)) return false;
        end = std::max(end, e);
      }
      end += o_.costs.transfer;
      for (size_t k = 0; k < a.transfers.size(); ++k) mine(r, i, k).done = end;
      now = end;
    }
    rep.times[size_t(r)][size_t(i)] = {start, now};
    ++pc_[size_t(r)];
    return true;
  }

  void post(int r, int i, size_t k, double now) {
    Slot& me = mine(r, i, k);
    me.posted = now;
    const Slot& peer = other(r, i, k);
    if (std::isnan(peer.posted) || peer.tag == me.tag) return;
    const Slot& rx = me.t->send ? peer : me;
    const Slot& tx = me.t->send ? me : peer;
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

  [[noreturn]] void deadlock() {
    std::string msg = "deadlock under blocking sends (send_slots " +
                      std::to_string(o_.send_slots) + "):";
    int first = -1;
    for (int r = 0; r < p_; ++r) {
      if (finished(r)) continue;
      const int i = int(pc_[size_t(r)]);
      const Action& a = s_.actions[size_t(r)][size_t(i)];
      if (first < 0) first = r;
      msg += " rank " + std::to_string(r) + " blocks at action " + std::to_string(i) + " (" +
             action_text(s_, a) + ")";
      for (size_t k = 0; k < a.transfers.size(); ++k) {
        const Transfer& t = a.transfers[k];
        const bool open = t.send ? std::isnan(send_end(r, i, k)) : std::isnan(other(r, i, k).posted);
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

  const Schedule& s_;
  const CheckOptions& o_;
  const int p_;
  std::vector<Channel> chan_;
  std::vector<std::vector<std::vector<size_t>>> index_;  // [rank][action][transfer]
  std::vector<size_t> pc_;
  std::vector<double> clock_;
  std::vector<int> live_;
  std::vector<double> weight_;  // [stage] costs.stage_weight over its mean (1 when empty)
};

}  // namespace

ScheduleReport check_schedule(const Schedule& s, const CheckOptions& opt) {
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
  pp_detail::check_lists(s);
  return Player(s, opt).play();
}

}  // namespace braid::parallel
