// The checker, part one: every rank's list on its own — well-formed actions,
// each owned (micro-batch, chunk) forwarded once and then backwarded once,
// each compute's input received before it, each send after the compute
// that made it — and every send paired with a receive of the same tag on
// the peer. Part two (checker_play.cc) plays the lists together.
#include <set>

#include "braid/error.h"
#include "braid/schedule_check.h"
#include "parallel/pp/checker_detail.h"

namespace braid::parallel {
namespace pp_detail {

void reject(const Schedule& s, int rank, int action, const std::string& why) {
  std::string where = "rank " + std::to_string(rank);
  if (action >= 0)
    where += ", action " + std::to_string(action) + " (" +
             action_text(s, s.actions[size_t(rank)][size_t(action)]) + ")";
  throw Error(Errc::kInvalidArgument, "schedule '" + s.name + "' rejected: " + where + ": " + why);
}

std::string transfer_text(const Schedule& s, const Transfer& t) {
  return action_text(s, Action{ActionKind::kComm, -1, -1, {t}});
}

}  // namespace pp_detail

namespace {

using pp_detail::reject;

std::string mb_stage(int mb, int stage) {
  return "micro-batch " + std::to_string(mb) + " on stage " + std::to_string(stage);
}

// What one rank has done so far, per (chunk, micro-batch).
struct RankState {
  int m;
  std::vector<char> fwd, bwd, in, grad_in, act_out, grad_out;
  RankState(int chunks, int mbs)
      : m(mbs), fwd(size_t(chunks * mbs)), bwd(fwd), in(fwd), grad_in(fwd), act_out(fwd),
        grad_out(fwd) {}
  char& at(std::vector<char>& v, int chunk, int mb) { return v[size_t(chunk * m + mb)]; }
};

void check_transfer(const Schedule& s, int r, int i, const Transfer& t, RankState& st) {
  const int S = s.stages();
  auto bad = [&](const std::string& why) {
    reject(s, r, i, pp_detail::transfer_text(s, t) + ": " + why);
  };
  if (t.mb < 0 || t.mb >= s.micro_batches) bad("no such micro-batch");
  if (t.stage < 0 || t.stage >= S) bad("no such stage");
  const bool act = t.what == Payload::kActivation;
  const int dst = act ? t.stage + 1 : t.stage - 1;
  if (dst < 0 || dst >= S) bad("stage " + std::to_string(t.stage) + " sends no " +
                               (act ? "activation" : "gradient"));
  const int from = s.rank_of(t.stage), to = s.rank_of(dst);
  if (t.send ? (from != r || t.peer != to) : (to != r || t.peer != from))
    bad("that message goes from rank " + std::to_string(from) + " to rank " + std::to_string(to));
  const int src_chunk = s.chunk_of(t.stage), dst_chunk = s.chunk_of(dst);
  const std::string what = std::string(act ? "activation" : "gradient") + " of " +
                           mb_stage(t.mb, t.stage);
  if (t.send) {
    char& sent = st.at(act ? st.act_out : st.grad_out, src_chunk, t.mb);
    if (sent) bad("the " + what + " is sent twice");
    if (!st.at(act ? st.fwd : st.bwd, src_chunk, t.mb))
      bad("sends the " + what + " before the " + (act ? "forward" : "backward") + " that makes it");
    sent = 1;
  } else {
    char& got = st.at(act ? st.in : st.grad_in, dst_chunk, t.mb);
    if (got) bad("the " + what + " is received twice");
    got = 1;
  }
}

}  // namespace

void pp_detail::check_lists(const Schedule& s) {
  BRAID_CHECK_ARG(s.ranks >= 1 && s.chunks >= 1 && s.micro_batches >= 1,
                  "schedule '" + s.name + "' rejected: ranks, chunks and micro-batches must be ≥ 1");
  BRAID_CHECK_ARG(s.chunks == 1 || s.ranks >= 2,
                  "schedule '" + s.name + "' rejected: chunks > 1 needs ranks ≥ 2");
  BRAID_CHECK_ARG(int(s.actions.size()) == s.ranks,
                  "schedule '" + s.name + "' rejected: " + std::to_string(s.actions.size()) +
                      " action lists for " + std::to_string(s.ranks) + " ranks");
  const int S = s.stages(), M = s.micro_batches;
  for (int r = 0; r < s.ranks; ++r) {
    const auto& list = s.actions[size_t(r)];
    RankState st(s.chunks, M);
    bool reduced = false;
    for (int i = 0; i < int(list.size()); ++i) {
      const Action& a = list[size_t(i)];
      if (a.kind == ActionKind::kForward || a.kind == ActionKind::kBackward) {
        if (a.mb < 0 || a.mb >= M) reject(s, r, i, "no such micro-batch (M = " + std::to_string(M) + ")");
        if (a.chunk < 0 || a.chunk >= s.chunks) reject(s, r, i, "no such chunk");
        const int stage = s.stage_of(r, a.chunk);
        if (a.kind == ActionKind::kForward) {
          if (st.at(st.fwd, a.chunk, a.mb)) reject(s, r, i, "a second forward of " + mb_stage(a.mb, stage));
          if (stage > 0 && !st.at(st.in, a.chunk, a.mb))
            reject(s, r, i, "its input, the activation of " + mb_stage(a.mb, stage - 1) +
                                ", is not received before it");
          st.at(st.fwd, a.chunk, a.mb) = 1;
        } else {
          if (!st.at(st.fwd, a.chunk, a.mb))
            reject(s, r, i, "backward of " + mb_stage(a.mb, stage) + " before its forward");
          if (st.at(st.bwd, a.chunk, a.mb)) reject(s, r, i, "a second backward of " + mb_stage(a.mb, stage));
          if (stage + 1 < S && !st.at(st.grad_in, a.chunk, a.mb))
            reject(s, r, i, "its output gradient, from " + mb_stage(a.mb, stage + 1) +
                                ", is not received before it");
          if (reduced) reject(s, r, i, "a backward after the gradients were reduced");
          st.at(st.bwd, a.chunk, a.mb) = 1;
        }
      } else if (a.kind == ActionKind::kComm) {
        if (a.transfers.empty()) reject(s, r, i, "a communication action with no transfers");
        for (const Transfer& t : a.transfers) check_transfer(s, r, i, t, st);
      } else if (a.kind == ActionKind::kReduceGrads) {
        if (reduced) reject(s, r, i, "gradients reduced twice");
        reduced = true;
      } else if (i + 1 != int(list.size())) {
        reject(s, r, i, "the optimizer step is not the last action");
      }
    }
    if (list.empty() || list.back().kind != ActionKind::kStep)
      reject(s, r, -1, "the list does not end with the optimizer step");
    for (int c = 0; c < s.chunks; ++c)
      for (int m = 0; m < M; ++m) {
        const int stage = s.stage_of(r, c);
        if (!st.at(st.fwd, c, m)) reject(s, r, -1, "no forward of " + mb_stage(m, stage));
        if (!st.at(st.bwd, c, m)) reject(s, r, -1, "no backward of " + mb_stage(m, stage));
        if (stage + 1 < S && !st.at(st.act_out, c, m))
          reject(s, r, -1, "never sends the activation of " + mb_stage(m, stage));
        if (stage > 0 && !st.at(st.grad_out, c, m))
          reject(s, r, -1, "never sends the gradient of " + mb_stage(m, stage));
      }
  }
  // Pairing: every send has a receive of the same message on its peer, and
  // every receive a send.
  std::vector<std::set<std::pair<int, uint32_t>>> sent(static_cast<size_t>(s.ranks)), got(sent);  // (peer, tag)
  for (int r = 0; r < s.ranks; ++r)
    for (const Action& a : s.actions[size_t(r)])
      for (const Transfer& t : a.transfers)
        (t.send ? sent : got)[size_t(r)].insert({t.peer, transfer_tag(s, t)});
  for (int r = 0; r < s.ranks; ++r) {
    const auto& list = s.actions[size_t(r)];
    for (int i = 0; i < int(list.size()); ++i)
      for (const Transfer& t : list[size_t(i)].transfers) {
        const auto& other = (t.send ? got : sent)[size_t(t.peer)];
        if (!other.count({r, transfer_tag(s, t)}))
          reject(s, r, i, pp_detail::transfer_text(s, t) + ": rank " + std::to_string(t.peer) +
                              " never " + (t.send ? "receives" : "sends") +
                              " it (no matching " + (t.send ? "receive" : "send") +
                              " in its list)");
      }
  }
}

}  // namespace braid::parallel
