// Pipeline schedules as data and their checker: GPipe, 1F1B and
// interleaved 1F1B pass at p = 2, 4 and M = 4, 8, 16 with the bubble and
// peak-activation figures their papers give; hand-broken schedules (a
// missing receive, a send order that deadlocks under blocking sends, a
// backward before its forward, crossed messages) are rejected with the
// rank, the action and what it waits for; the timeline and the layer split;
// per-stage costs show why interleaved chunks must be cut by cost.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "braid/error.h"
#include "braid/model_spec.h"
#include "braid/models.h"
#include "braid/pipeline.h"
#include "braid/tensor_parallel.h"

namespace braid::parallel {
namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::string rejection(const Schedule& s, const CheckOptions& o = {}) {
  try {
    check_schedule(s, o);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kInvalidArgument) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "schedule '" << s.name << "' was accepted";
  return "";
}

// Index of the first action on `rank` whose text is `text`.
size_t find_action(const Schedule& s, int rank, const std::string& text) {
  const auto& l = s.actions[size_t(rank)];
  for (size_t i = 0; i < l.size(); ++i)
    if (action_text(s, l[i]) == text) return i;
  ADD_FAILURE() << "rank " << rank << " has no action '" << text << "':\n" << format_actions(s);
  return 0;
}

TEST(PipelineSchedule, GpipeAnd1f1bBubbleIsTheTextbookFraction) {
  for (int p : {2, 4})
    for (int m : {4, 8, 16})
      for (const char* name : {"gpipe", "1f1b"})
        // Bubble (p−1)/(M+p−1) for backward = forward and for backward = 2×.
        for (double bwd : {1.0, 2.0}) {
          const Schedule s = make_schedule(name, p, m);
          CheckOptions o;
          o.costs.backward = bwd;
          const ScheduleReport r = check_schedule(s, o);
          const std::string what = std::string(name) + " p=" + std::to_string(p) +
                                   " m=" + std::to_string(m) + " bwd=" + std::to_string(bwd);
          EXPECT_NEAR(r.bubble, double(p - 1) / double(m + p - 1), 1e-12) << what;
          EXPECT_NEAR(r.makespan, (m + p - 1) * (1.0 + bwd), 1e-9) << what;
          for (int rank = 0; rank < p; ++rank) {
            EXPECT_DOUBLE_EQ(r.busy[size_t(rank)], m * (1.0 + bwd)) << what;
            if (std::string(name) == "gpipe")
              EXPECT_EQ(r.peak_live[size_t(rank)], m) << what << " rank " << rank;
            else  // 1F1B: rank r holds p − r, never more than min(p, M)
              EXPECT_EQ(r.peak_live[size_t(rank)], std::min(p - rank, m)) << what << " rank " << rank;
          }
        }
}

TEST(PipelineSchedule, InterleavedHasASmallerBubbleThan1f1b) {
  for (int p : {2, 4})
    for (int m : {4, 8, 16}) {
      const ScheduleReport one = check_schedule(one_f_one_b_schedule(p, m));
      const ScheduleReport two = check_schedule(interleaved_schedule(p, m, 2));
      const std::string what = "p=" + std::to_string(p) + " m=" + std::to_string(m);
      EXPECT_LT(two.bubble, one.bubble) << what;
      // Each chunk is half the layers: the idle time halves, (p−1)/(vM+p−1).
      EXPECT_NEAR(two.bubble, double(p - 1) / double(2 * m + p - 1), 1e-12) << what;
      for (int rank = 0; rank < p; ++rank)  // in chunk activations (half size)
        EXPECT_LE(two.peak_live[size_t(rank)], 2 * m) << what;
    }
}

// Each stage's summed cost under `bounds` (partition_layers').
std::vector<double> stage_costs(const std::vector<double>& cost, const std::vector<size_t>& b) {
  std::vector<double> w;
  for (size_t k = 0; k + 1 < b.size(); ++k) {
    w.push_back(0);
    for (size_t i = b[k]; i < b[k + 1]; ++i) w.back() += cost[i];
  }
  return w;
}

TEST(PipelineSchedule, InterleavedNeedsChunksCutByCostNotByCount) {
  // bench/model_parallel.sh's pipeline GPT: 11 modules (emb, 8 blocks,
  // ln_f, lm_head), of which the blocks carry nearly all the work.
  nn::GptConfig cfg;
  cfg.dim = 256;
  cfg.heads = 4;
  cfg.layers = 8;
  cfg.context = 64;
  const std::vector<double> cost = gpt_spec(cfg, 0)->unit_costs();
  ASSERT_EQ(cost.size(), gpt_spec(cfg, 0)->unit_count());
  for (size_t i = 1; i <= 8; ++i) {
    EXPECT_EQ(cost[i], cost[1]);
    EXPECT_GT(cost[i], 10 * cost.back()) << "a block against lm_head";
  }
  EXPECT_LT(cost.front(), 1e-3 * cost[1]);
  EXPECT_LT(cost[9], 1e-2 * cost[1]);
  CheckOptions o;
  auto bubble = [&](const Schedule& s, const std::vector<size_t>& bounds) {
    o.costs.stage_weight = stage_costs(cost, bounds);
    return check_schedule(s, o).bubble;
  };
  const Schedule one = one_f_one_b_schedule(2, 8), two = interleaved_schedule(2, 8, 2);
  const std::vector<double> equal(cost.size(), 1.0);
  // By count, 4 chunks get 1, 3, 3 and 1 blocks: rank 0's chunks differ
  // threefold, so the interleaved ranks wait on each other at every
  // exchange, and its bubble exceeds 1F1B's, as measured before the fix.
  const std::vector<size_t> by_count = partition_layers(equal, 4);
  EXPECT_EQ(by_count, (std::vector<size_t>{0, 2, 5, 8, 11}));
  const double one_count = bubble(one, partition_layers(equal, 2));
  EXPECT_GT(bubble(two, by_count), one_count);
  // By cost every chunk gets two blocks, and interleaved is below 1F1B
  // again, near its equal-chunk figure (p−1)/(vM+p−1) = 1/17.
  const std::vector<size_t> by_cost = partition_layers(cost, 4);
  EXPECT_EQ(by_cost, (std::vector<size_t>{0, 3, 5, 7, 11}));
  const double one_cost = bubble(one, partition_layers(cost, 2));
  EXPECT_LT(bubble(two, by_cost), one_cost);
  EXPECT_NEAR(bubble(two, by_cost), 1.0 / 17, 0.02);
  // Weights that are all equal change nothing.
  o.costs.stage_weight = {3, 3, 3, 3};
  EXPECT_NEAR(check_schedule(two, o).bubble, 1.0 / 17, 1e-12);
  o.costs.stage_weight = {1, 2};
  EXPECT_TRUE(contains(rejection(two, o), "2 stage weights for 4 stages")) << "wrong count";
}

TEST(PipelineSchedule, MeasuredBubbleCountsWaitsAndTheTimeOutsideEachSpan) {
  // Rank 0 runs [0, 10] and waits 1 inside; rank 1 runs [2, 12] and waits
  // 3: span 12, idle 1 + 2 (after its end) + 3 + 2 (before its start).
  const auto [idle, total] = pipeline_bubble({{0, 10}, {2, 12}}, {1, 3});
  EXPECT_DOUBLE_EQ(idle, 8);
  EXPECT_DOUBLE_EQ(total, 24);
  // One stage waits for no one.
  const auto one = pipeline_bubble({{5, 9}}, {0});
  EXPECT_DOUBLE_EQ(one.first, 0);
  EXPECT_DOUBLE_EQ(one.second, 4);
  try {
    pipeline_bubble({{0, 1}, {0, 1}}, {0});
    ADD_FAILURE() << "mismatched lists accepted";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "2 spans and 1 communication times")) << e.what();
  }
}

TEST(PipelineSchedule, GeneratedSchedulesAlsoPassWithBufferedSends) {
  for (int slots : {1, 4})
    for (const Schedule& s :
         {gpipe_schedule(4, 8), one_f_one_b_schedule(4, 8), interleaved_schedule(4, 8, 2)}) {
      CheckOptions o;
      o.send_slots = slots;
      const ScheduleReport r = check_schedule(s, o);
      EXPECT_GT(r.makespan, 0) << s.name;
    }
}

TEST(PipelineSchedule, RejectsAMissingReceive) {
  Schedule s = one_f_one_b_schedule(2, 4);
  // Rank 1 no longer receives micro-batch 2's activation.
  for (auto& a : s.actions[1])
    std::erase_if(a.transfers, [](const Transfer& t) {
      return !t.send && t.what == Payload::kActivation && t.mb == 2;
    });
  std::erase_if(s.actions[1], [](const Action& a) {
    return a.kind == ActionKind::kComm && a.transfers.empty();
  });
  const size_t f2 = find_action(s, 1, "F m2");
  const std::string m = rejection(s);
  EXPECT_TRUE(contains(m, "schedule '1f1b' rejected: rank 1, action " + std::to_string(f2) +
                              " (F m2): its input, the activation of micro-batch 2 on stage 0, "
                              "is not received before it"))
      << m;
}

TEST(PipelineSchedule, RejectsASendWithNoReceiveOnThePeer) {
  Schedule s = gpipe_schedule(2, 4);
  // Rank 0 sends micro-batch 3's activation a second time, to no one's
  // receive: the pairing names the sending action.
  Transfer extra{true, Payload::kActivation, 3, 0, 1};
  s.actions[0].insert(s.actions[0].end() - 2, Action{ActionKind::kComm, -1, -1, {extra}});
  const std::string m = rejection(s);
  EXPECT_TRUE(contains(m, "rank 0, action ")) << m;
  EXPECT_TRUE(contains(m, "send act m3 s0->s1 to rank 1")) << m;
  EXPECT_TRUE(contains(m, "sent twice")) << m;
}

// Every communication action of `s` split into one action per transfer,
// in the order they were posted together.
Schedule with_transfers_apart(Schedule s) {
  for (auto& list : s.actions) {
    std::vector<Action> split;
    for (const Action& a : list) {
      if (a.kind != ActionKind::kComm || a.transfers.size() < 2) {
        split.push_back(a);
        continue;
      }
      for (const Transfer& t : a.transfers) split.push_back({ActionKind::kComm, -1, -1, {t}});
    }
    list = split;
  }
  return s;
}

TEST(PipelineSchedule, RejectsSendsThatDeadlockWhenBlocking) {
  // 1F1B's steady state with each send split from the receive it was
  // posted with, sends first: rank 0 sends an activation while rank 1
  // sends a gradient, and under rendezvous neither is received.
  Schedule s = with_transfers_apart(one_f_one_b_schedule(2, 4));
  const std::string m = rejection(s);
  EXPECT_TRUE(contains(m, "schedule '1f1b' rejected: deadlock under blocking sends")) << m;
  const size_t a0 = find_action(s, 0, "send act m1 s0->s1 to rank 1");
  const size_t a1 = find_action(s, 1, "send grad m0 s1->s0 to rank 0");
  EXPECT_TRUE(contains(m, "rank 0 blocks at action " + std::to_string(a0) +
                              " (send act m1 s0->s1 to rank 1), waiting for rank 1 to receive "
                              "act m1 s0 (rank 1 is at action " + std::to_string(a1) +
                              " (send grad m0 s1->s0 to rank 0))"))
      << m;
  EXPECT_TRUE(contains(m, "rank 1 blocks at action " + std::to_string(a1))) << m;
  // With one buffered message per channel the same lists complete, as
  // braid's small messages would.
  CheckOptions o;
  o.send_slots = 1;
  EXPECT_GT(check_schedule(s, o).makespan, 0);
}

TEST(PipelineSchedule, RejectsABackwardBeforeItsForward) {
  Schedule s = gpipe_schedule(2, 4);
  auto& l = s.actions[1];
  const size_t f3 = find_action(s, 1, "F m3");
  const size_t b3 = find_action(s, 1, "B m3");
  std::swap(l[f3], l[b3]);
  const std::string m = rejection(s);
  EXPECT_TRUE(contains(m, "rank 1, action " + std::to_string(f3) +
                              " (B m3): backward of micro-batch 3 on stage 1 before its forward"))
      << m;
}

TEST(PipelineSchedule, RejectsMessagesReceivedOutOfPostingOrder) {
  Schedule s = gpipe_schedule(2, 4);
  // Rank 1 takes micro-batches 1 and 0 in one action, 1 first; rank 0
  // sends 0 first, and braid matches the two in posting order.
  auto& l = s.actions[1];
  const size_t r1 = find_action(s, 1, "recv act m1 s0->s1 from rank 0");
  ASSERT_EQ(action_text(s, l[0]), "recv act m0 s0->s1 from rank 0");
  l[0].transfers.insert(l[0].transfers.begin(), l[r1].transfers[0]);
  l.erase(l.begin() + long(r1));
  const size_t s0 = find_action(s, 0, "send act m0 s0->s1 to rank 1");
  const std::string m = rejection(s);
  EXPECT_TRUE(contains(m, "rank 1, action 0 (recv act m1 s0->s1 from rank 0 + recv act m0 s0->s1 "
                          "from rank 0): recv act m1 s0->s1 from rank 0 would receive rank 0's "
                          "action " + std::to_string(s0) +
                          " (send act m0 s0->s1 to rank 1): messages between two ranks are "
                          "matched in posting order"))
      << m;
}

// A schedule proven once and played under many costs (the planner's use)
// reports what check_schedule does for each, number for number, and
// refuses what it refuses.
TEST(PipelineSchedule, AReplayPlaysAsTheCheckerDoesUnderEveryCost) {
  for (const char* name : {"gpipe", "1f1b", "interleaved"}) {
    const int chunks = std::string(name) == "interleaved" ? 2 : 1;
    const Schedule s = make_schedule(name, 4, 8, chunks);
    const ScheduleReplay replay(s);
    for (int slots : {0, 1})
      for (double transfer : {0.0, 0.3})
        for (const std::vector<double>& w :
             {std::vector<double>{}, std::vector<double>(size_t(4 * chunks), 1.0),
              [&] {
                std::vector<double> v;
                for (int i = 0; i < 4 * chunks; ++i) v.push_back(1.0 + 0.37 * i);
                return v;
              }()}) {
          CheckOptions o;
          o.send_slots = slots;
          o.costs = {1.3, 2.9, transfer, w};
          const ScheduleReport a = check_schedule(s, o), b = replay.play(o);
          const std::string what = std::string(name) + " slots " + std::to_string(slots);
          EXPECT_EQ(a.makespan, b.makespan) << what;
          EXPECT_EQ(a.bubble, b.bubble) << what;
          EXPECT_EQ(a.busy, b.busy) << what;
          EXPECT_EQ(a.peak_live, b.peak_live) << what;
          ASSERT_EQ(a.times.size(), b.times.size());
          for (size_t r = 0; r < a.times.size(); ++r)
            for (size_t i = 0; i < a.times[r].size(); ++i) {
              EXPECT_EQ(a.times[r][i].start, b.times[r][i].start) << what;
              EXPECT_EQ(a.times[r][i].end, b.times[r][i].end) << what;
            }
          EXPECT_TRUE(replay.play(o, false).times.empty());
        }
  }
  // A list that deadlocks under blocking sends: the replay is built (its
  // lists are well formed) but refuses to play, naming the deadlock.
  Schedule s = with_transfers_apart(one_f_one_b_schedule(2, 4));
  const ScheduleReplay replay(s);
  try {
    replay.play({});
    ADD_FAILURE() << "a deadlocking schedule played";
  } catch (const Error& e) {
    EXPECT_EQ(e.what(), rejection(s));
  }
  // A list missing its receive is refused when the replay is built.
  Schedule g = gpipe_schedule(2, 4);
  auto& l = g.actions[1];
  l.erase(l.begin() + long(find_action(g, 1, "recv act m1 s0->s1 from rank 0")));
  EXPECT_THROW(ScheduleReplay{g}, Error);
}

TEST(PipelineSchedule, TimelineShowsOneRowPerRank) {
  const Schedule s = one_f_one_b_schedule(2, 4);
  const std::string t = format_timeline(s, check_schedule(s));
  // Rank 0 waits for micro-batch 0's gradient after two forwards; rank 1,
  // the last stage, runs each backward right after its forward.
  EXPECT_TRUE(contains(t, "rank 0 |F0 F1 .  .  B0 B0 F2 B1 B1 F3 B2 B2 .  B3 B3 \n")) << t;
  EXPECT_TRUE(contains(t, "rank 1 |.  F0 B0 B0 F1 B1 B1 F2 B2 B2 F3 B3 B3 .  .  \n")) << t;
  EXPECT_TRUE(contains(t, "bubble 20.0 %, peak live activations per rank: 2 1")) << t;
}

TEST(PipelineSchedule, PartitionBalancesContiguousLayers) {
  EXPECT_EQ(partition_layers({1, 1, 1, 1}, 2), (std::vector<size_t>{0, 2, 4}));
  EXPECT_EQ(partition_layers({4, 1, 1, 1, 1}, 2), (std::vector<size_t>{0, 1, 5}));
  // A GPT: embedding, 4 blocks, final norm and head, costed by blocks.
  EXPECT_EQ(partition_layers({0, 1, 1, 1, 1, 0, 0}, 2)[1], 3u);
  EXPECT_THROW(partition_layers({1, 1}, 3), Error);
  EXPECT_THROW(make_schedule("zb", 2, 4), Error);
  EXPECT_THROW(interleaved_schedule(4, 6, 2), Error);
}

// The largest stage sum of a split, and the best over every contiguous
// split of `cost` into `stages` non-empty ranges (brute force).
double largest_stage(const std::vector<double>& cost, const std::vector<size_t>& b) {
  double worst = 0;
  for (size_t k = 0; k + 1 < b.size(); ++k) {
    double sum = 0;
    for (size_t i = b[k]; i < b[k + 1]; ++i) sum += cost[i];
    worst = std::max(worst, sum);
  }
  return worst;
}

double best_by_brute_force(const std::vector<double>& cost, std::vector<size_t> b, int stages) {
  if (int(b.size()) == stages) {
    b.push_back(cost.size());
    return largest_stage(cost, b);
  }
  double best = 1e300;
  const size_t left = size_t(stages) - b.size();  // cuts still to place
  for (size_t at = b.back() + 1; at + left <= cost.size(); ++at) {
    std::vector<size_t> next = b;
    next.push_back(at);
    best = std::min(best, best_by_brute_force(cost, next, stages));
  }
  return best;
}

TEST(PipelineSchedule, PartitionOfUnevenCostsIsOptimal) {
  // A GPT costed as --pp-balance measures it: a cheap embedding, equal
  // blocks, a cheap final norm and a head with its loss worth 3 blocks.
  const std::vector<double> gpt = {0.1, 1, 1, 1, 1, 1, 1, 0.05, 3};
  const std::vector<size_t> b = partition_layers(gpt, 3);
  EXPECT_EQ(b, (std::vector<size_t>{0, 4, 7, 9}));  // 3.1 | 3 | 3.05
  // By count the head's stage would hold 3 blocks' worth more.
  EXPECT_LT(largest_stage(gpt, b), largest_stage(gpt, {0, 3, 6, 9}));
  const std::vector<std::vector<double>> costs = {
      {5, 1, 1, 1, 1, 1, 5}, {1, 9, 1, 1, 9, 1}, {0.3, 2.5, 0.1, 0.7, 4, 4, 0.2, 1.9}, {2, 0, 0, 2}};
  for (const auto& c : costs)
    for (int stages = 1; stages <= int(c.size()); ++stages) {
      const std::vector<size_t> got = partition_layers(c, stages);
      ASSERT_EQ(got.size(), size_t(stages) + 1);
      EXPECT_EQ(got.front(), 0u);
      EXPECT_EQ(got.back(), c.size());
      for (size_t k = 1; k < got.size(); ++k) EXPECT_LT(got[k - 1], got[k]) << "empty stage";
      EXPECT_DOUBLE_EQ(largest_stage(c, got), best_by_brute_force(c, {0}, stages))
          << c.size() << " layers, " << stages << " stages";
    }
}

TEST(PipelineSchedule, PartitionOfEqualCostsIsTheCountSplit) {
  EXPECT_EQ(partition_layers(std::vector<double>(9, 2.5), 3), (std::vector<size_t>{0, 3, 6, 9}));
  EXPECT_EQ(partition_layers(std::vector<double>(8, 1.0), 4),
            (std::vector<size_t>{0, 2, 4, 6, 8}));
  EXPECT_EQ(partition_layers(std::vector<double>(5, 1.0), 5),
            (std::vector<size_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(partition_layers(std::vector<double>(5, 1.0), 1), (std::vector<size_t>{0, 5}));
}

TEST(PipelineSchedule, PartitionRefusesMoreStagesThanLayersByName) {
  auto refused = [](const std::vector<double>& cost, int stages, const std::string& needle) {
    try {
      partition_layers(cost, stages);
      ADD_FAILURE() << "accepted; expected '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::kInvalidArgument);
      EXPECT_TRUE(contains(e.what(), needle)) << e.what();
    }
  };
  refused({1, 1, 1}, 4, "cannot cut 3 layers into 4 non-empty stages");
  refused({}, 1, "cannot cut 0 layers into 1 non-empty stages");
  refused({1, 1}, 0, "cannot cut 2 layers into 0 non-empty stages");
  refused({1, -1, 1}, 2, "layer 1 has a negative cost");
}

TEST(PipelineSchedule, FormatPartitionShowsEachStagesPredictedTime) {
  const std::string t = format_partition({0.001, 0.002, 0.0005, 0.003}, {0, 2, 4});
  EXPECT_EQ(t, "stage 0: layers [0, 2), predicted 3.000 ms\n"
               "stage 1: layers [2, 4), predicted 3.500 ms\n");
  EXPECT_THROW(format_partition({1, 1}, {0, 3}), Error);
  EXPECT_THROW(format_partition({1, 1}, {0, 0, 2}), Error);
}

}  // namespace
}  // namespace braid::parallel
