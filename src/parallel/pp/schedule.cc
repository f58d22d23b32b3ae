// Schedule as data: how actions print, the tag of each transfer, and the
// lowering of each rank's compute order into actions with their transfers.
//
// Lowering. A block's sends are posted right after it, together with the
// receives the rank's next block needs: with blocking
// sends, two neighbours that each send and then receive would wait on each
// other (1F1B's steady state: one sends an activation forward while the
// other sends a gradient back); posted together, both pairs complete.
// Receives on one channel are taken in the order the peer sends on it,
// because braid matches messages between two ranks in posting order: a
// compute that needs a message the peer sends later than others still
// unread first receives those others (they wait in the executor's buffers).
#include <map>
#include <tuple>

#include "braid/error.h"
#include "braid/schedule.h"

namespace braid::parallel {

std::string action_text(const Schedule& s, const Action& a) {
  auto compute = [&](const char* k) {
    std::string t = std::string(k) + " m" + std::to_string(a.mb);
    if (s.chunks > 1) t += " c" + std::to_string(a.chunk);
    return t;
  };
  switch (a.kind) {
    case ActionKind::kForward: return compute("F");
    case ActionKind::kBackward: return compute("B");
    case ActionKind::kReduceGrads: return "reduce grads";
    case ActionKind::kStep: return "optimizer step";
    case ActionKind::kComm: break;
  }
  std::string t;
  for (const Transfer& x : a.transfers) {
    if (!t.empty()) t += " + ";
    const bool act = x.what == Payload::kActivation;
    const int to = act ? x.stage + 1 : x.stage - 1;
    t += std::string(x.send ? "send " : "recv ") + (act ? "act" : "grad") + " m" +
         std::to_string(x.mb) + " s" + std::to_string(x.stage) + "->s" + std::to_string(to) +
         (x.send ? " to rank " : " from rank ") + std::to_string(x.peer);
  }
  return t.empty() ? "empty communication" : t;
}

uint32_t transfer_tag(const Schedule& s, const Transfer& t) {
  const uint64_t tag = (uint64_t(t.mb) * uint64_t(s.stages()) + uint64_t(t.stage)) * 2 +
                       (t.what == Payload::kGradient ? 1 : 0);
  BRAID_CHECK_ARG(t.mb >= 0 && t.stage >= 0 && tag < (uint64_t(1) << 30),
                  "pipeline: transfer of micro-batch " + std::to_string(t.mb) + " stage " +
                      std::to_string(t.stage) + " has no tag (too many micro-batches × stages)");
  return uint32_t(tag);
}

namespace {

struct Msg {
  Payload what;
  int mb, stage;
  bool operator<(const Msg& o) const {
    return std::tie(what, mb, stage) < std::tie(o.what, o.mb, o.stage);
  }
};

// The message a compute step produces for another rank, if any.
bool produces(const Schedule& s, int rank, const ComputeStep& c, Msg& m, int& to) {
  const int st = s.stage_of(rank, c.chunk);
  if (c.forward && st + 1 < s.stages()) {
    m = {Payload::kActivation, c.mb, st};
    to = s.rank_of(st + 1);
    return true;
  }
  if (!c.forward && st > 0) {
    m = {Payload::kGradient, c.mb, st};
    to = s.rank_of(st - 1);
    return true;
  }
  return false;
}

// The message a compute step needs from another rank, if any.
bool needs(const Schedule& s, int rank, const ComputeStep& c, Msg& m, int& from) {
  const int st = s.stage_of(rank, c.chunk);
  if (c.forward && st > 0) {
    m = {Payload::kActivation, c.mb, st - 1};
    from = s.rank_of(st - 1);
    return true;
  }
  if (!c.forward && st + 1 < s.stages()) {
    m = {Payload::kGradient, c.mb, st + 1};
    from = s.rank_of(st + 1);
    return true;
  }
  return false;
}

}  // namespace

Schedule lower_schedule(std::string name, int ranks, int chunks, int micro_batches,
                        const std::vector<std::vector<ComputeStep>>& order) {
  BRAID_CHECK_ARG(ranks >= 1 && chunks >= 1 && micro_batches >= 1,
                  "pipeline schedule '" + name + "': ranks, chunks and micro-batches must be ≥ 1 (got " +
                      std::to_string(ranks) + ", " + std::to_string(chunks) + ", " +
                      std::to_string(micro_batches) + ")");
  BRAID_CHECK_ARG(int(order.size()) == ranks, "pipeline schedule '" + name + "': " +
                                                  std::to_string(order.size()) +
                                                  " compute orders for " + std::to_string(ranks) +
                                                  " ranks");
  Schedule s;
  s.name = std::move(name);
  s.ranks = ranks;
  s.chunks = chunks;
  s.micro_batches = micro_batches;
  s.actions.resize(size_t(ranks));
  // What each rank sends on each channel, in order.
  std::vector<std::map<int, std::vector<Msg>>> sends(static_cast<size_t>(ranks));  // [src][dst]
  for (int r = 0; r < ranks; ++r)
    for (const ComputeStep& c : order[size_t(r)]) {
      Msg m;
      int to;
      if (produces(s, r, c, m, to)) sends[size_t(r)][to].push_back(m);
    }
  for (int r = 0; r < ranks; ++r) {
    auto& out = s.actions[size_t(r)];
    std::map<int, size_t> taken;  // [src] messages received so far
    std::vector<Transfer> pending;
    const auto& steps = order[size_t(r)];
    for (size_t b = 0; b < steps.size();) {
      size_t e = b;  // the block is steps [b, e]
      while (steps[e].with_next && e + 1 < steps.size()) ++e;
      // Receives for the block, in channel order; a message the block makes
      // itself (a chunk feeding the next on this rank) needs none.
      for (size_t k = b; k <= e; ++k) {
        Msg m;
        int from;
        if (!needs(s, r, steps[k], m, from) || from == r) continue;
        const auto& chan = sends[size_t(from)][r];
        size_t j = 0;
        while (j < chan.size() && (chan[j] < m || m < chan[j])) ++j;
        // A message no one sends: leave it to the checker to name.
        if (j < chan.size())
          for (size_t& i = taken[from]; i <= j; ++i)
            pending.push_back({false, chan[i].what, chan[i].mb, chan[i].stage, from});
      }
      if (!pending.empty()) out.push_back({ActionKind::kComm, -1, -1, std::move(pending)});
      pending.clear();
      for (size_t k = b; k <= e; ++k) {
        const ComputeStep& c = steps[k];
        out.push_back({c.forward ? ActionKind::kForward : ActionKind::kBackward, c.mb, c.chunk, {}});
        Msg m;
        int to;
        if (produces(s, r, c, m, to)) pending.push_back({true, m.what, m.mb, m.stage, to});
      }
      b = e + 1;
    }
    if (!pending.empty()) out.push_back({ActionKind::kComm, -1, -1, std::move(pending)});
    out.push_back({ActionKind::kReduceGrads, -1, -1, {}});
    out.push_back({ActionKind::kStep, -1, -1, {}});
  }
  return s;
}

Schedule make_schedule(const std::string& name, int ranks, int micro_batches, int chunks) {
  if (name == "gpipe" || name == "1f1b") {
    BRAID_CHECK_ARG(chunks == 1, "pipeline schedule '" + name +
                                     "' has one stage per rank (chunks 1, got " +
                                     std::to_string(chunks) + "); use 'interleaved'");
    return name == "gpipe" ? gpipe_schedule(ranks, micro_batches)
                           : one_f_one_b_schedule(ranks, micro_batches);
  }
  if (name == "interleaved") return interleaved_schedule(ranks, micro_batches, chunks);
  throw Error(Errc::kInvalidArgument, "unknown pipeline schedule '" + name +
                                          "' (valid: gpipe, 1f1b, interleaved)");
}

}  // namespace braid::parallel
