// braid train gpt --moe-experts … --dp/--ep/--pp, end to end with the real
// binary (BRAID_BIN): expert parallelism over real processes.
//   * with capacity large enough that no token drops, the layouts (dp, ep,
//     tp, pp) = (2,2,1,1), (4,2,1,1), (2,1,1,1), (2,2,1,2), (4,4,1,1) and
//     (2,2,2,1) each give step losses, per-expert token counts and final
//     weights equal to the
//     single-process run's (losses 1e-5 relative; every weight tensor
//     within 1e-5 of its largest element);
//   * with a small capacity the drops are the same in two runs and in the
//     single process and ep layouts (a group is one sequence, so the drop
//     rule does not see the layout), and the losses still agree;
//   * with shadow experts forced on (--moe-shadow 1), lent weights and
//     returned gradients, the same layouts still equal one process;
//   * the clipping norm counts every expert once (equal to one process);
//   * a checkpoint written at one layout resumes at another;
//   * the JSON log carries the MoE record (tokens per expert, dropped,
//     aux loss, imbalance, all_to_all time);
//   * bad layouts are refused before any rank starts, naming the flag.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "braid/checkpoint.h"
#include "support/multiproc.h"
#include "support/tool.h"
#include "support/weights.h"

namespace {

using braid::testing::braid_bin;
using braid::testing::CommandResult;
using braid::testing::expect_same_losses;
using braid::testing::run_command;

// A tiny MoE GPT: 2 blocks, both with 4 experts, width 32, 16-byte
// context, 8 samples a step; SGD, so that a gradient difference shows in
// the weights in proportion.
const std::string kBase =
    " train gpt --batch 8 --layers 2 --d-model 32 --heads 4 --context 16 --threads 1 --quiet"
    " --moe-every 1 --optimizer sgd --lr 0.1 --moe-aux 0.05";
const std::string kTiny = kBase + " --moe-experts 4";

const std::string& dir() {
  static const std::string d = braid::testing::temp_dir("trainmoe");
  return d;
}
std::string ck(const std::string& tag) { return dir() + "/" + tag + ".ck"; }

std::vector<nlohmann::json> train(const std::string& extra, int steps, const std::string& tag) {
  const std::string log = dir() + "/" + tag + ".jsonl";
  CommandResult r = run_command(braid_bin() + kTiny + " --steps " + std::to_string(steps) + " " +
                                extra + " --json-log " + log +
                                (extra.find("--checkpoint") == std::string::npos
                                     ? " --checkpoint " + ck(tag)
                                     : ""));
  EXPECT_EQ(r.status, 0) << extra << "\n" << r.out;
  return braid::testing::read_json_lines(log);
}

// Every "model/" tensor of `b` within 1e-5 of the largest |element| of the
// same tensor of `a` (relative to the tensor's scale).
void expect_same_weights_rel(const std::string& a, const std::string& b, const std::string& what) {
  const braid::Checkpoint ca = braid::load_checkpoint(a);
  const auto diffs = braid::testing::weight_diffs(a, b);
  ASSERT_FALSE(diffs.empty()) << what;
  for (const auto& [name, d] : diffs) {
    const braid::Tensor& t = ca.tensors.at(name);
    double scale = 0;
    for (int64_t i = 0; i < t.numel(); ++i) scale = std::max(scale, double(std::fabs(t.f32()[i])));
    EXPECT_LE(d, 1e-5 * std::max(scale, 1e-3)) << what << ": " << name << " (scale " << scale << ")";
  }
}

// Each step's MoE record: tokens per expert and dropped choices the same.
void expect_same_routing(const std::vector<nlohmann::json>& a, const std::vector<nlohmann::json>& b,
                         const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i + 1 < a.size(); ++i) {
    ASSERT_TRUE(a[i].contains("moe") && b[i].contains("moe")) << what << " step " << i;
    EXPECT_EQ(a[i]["moe"]["tokens_per_expert"], b[i]["moe"]["tokens_per_expert"])
        << what << " step " << i;
    EXPECT_EQ(a[i]["moe"]["dropped"], b[i]["moe"]["dropped"]) << what << " step " << i;
    const double xa = a[i]["moe"]["aux_loss"], xb = b[i]["moe"]["aux_loss"];
    EXPECT_NEAR(xb, xa, 1e-5 * xa) << what << " step " << i;
  }
}

}  // namespace

TEST(TrainMoe, ExpertParallelLayoutsMatchSingleProcess) {
  const std::string cap = " --moe-capacity 8 --moe-top-k 2";  // room for every choice
  const auto serial = train(cap, 4, "serial");
  ASSERT_EQ(serial.size(), 5u);
  for (size_t i = 0; i + 1 < serial.size(); ++i) {
    const auto& m = serial[i]["moe"];
    EXPECT_EQ(m["dropped"], 0) << "step " << i;
    // 2 layers × 8 sequences × 16 tokens × top-2 choices.
    EXPECT_EQ(m["routed"], 2 * 8 * 16 * 2);
    int64_t sum = 0;
    for (const auto& t : m["tokens_per_expert"]) sum += int64_t(t);
    EXPECT_EQ(sum, 2 * 8 * 16 * 2);
    EXPECT_GE(double(m["imbalance"]), 1.0);
    EXPECT_GT(double(m["aux_loss"]), 0.0);
    EXPECT_EQ(double(m["a2a_s"]), 0.0) << "one process sends nothing";
  }
  for (const std::string& layout :
       {std::string("--dp 2 --ep 2"), std::string("--dp 4 --ep 2"), std::string("--dp 2 --ep 1"),
        std::string("--dp 2 --ep 2 --pp 2"), std::string("--dp 4 --ep 4"),
        std::string("--dp 2 --ep 2 --tp 2")}) {
    const auto v = train(cap + " " + layout, 4, "layout");
    expect_same_losses(serial, v, layout);
    expect_same_routing(serial, v, layout);
    expect_same_weights_rel(ck("serial"), ck("layout"), layout);
    if (layout.find("--ep 1") == std::string::npos && v.size() == serial.size()) {
      EXPECT_GT(double(v[0]["moe"]["a2a_s"]), 0.0) << layout << ": experts exchanged tokens";
      EXPECT_EQ(v.back()["ep"], layout.find("--ep 4") != std::string::npos ? 4 : 2);
    }
  }
}

TEST(TrainMoe, ShadowExpertsMatchSingleProcess) {
  // --moe-shadow 1: a busy rank lends an expert whenever that takes a row
  // off it, so the lent weights, the rows kept home and the gradients sent
  // back all run; the result must still be the one-process run's. With
  // drops too (--moe-capacity 0.5): shadows see only the kept rows.
  for (const std::string& cap :
       {std::string(" --moe-capacity 8 --moe-top-k 2"), std::string(" --moe-capacity 0.5")}) {
    const auto serial = train(cap, 4, "shadow_serial");
    ASSERT_EQ(serial.size(), 5u) << cap;
    EXPECT_EQ(serial[0]["moe"]["shadows"], 0) << "one process has no one to lend to";
    for (const std::string& layout :
         {std::string("--dp 2 --ep 2"), std::string("--dp 4 --ep 4"), std::string("--dp 4 --ep 2"),
          std::string("--dp 2 --ep 2 --pp 2"), std::string("--dp 2 --ep 2 --tp 2")}) {
      const std::string what = cap + " " + layout;
      const auto v = train(cap + " --moe-shadow 1 " + layout, 4, "shadow_layout");
      ASSERT_EQ(v.size(), serial.size()) << what;
      int64_t shadows = 0;
      for (size_t i = 0; i + 1 < v.size(); ++i) shadows += int64_t(v[i]["moe"]["shadows"]);
      EXPECT_GT(shadows, 0) << what << ": no expert was lent, nothing tested";
      expect_same_losses(serial, v, what);
      expect_same_routing(serial, v, what);
      expect_same_weights_rel(ck("shadow_serial"), ck("shadow_layout"), what);
    }
  }
  // --moe-shadow 0 never lends.
  const auto off = train(" --moe-capacity 8 --moe-shadow 0 --dp 2 --ep 2", 2, "shadow_off");
  ASSERT_EQ(off.size(), 3u);
  for (size_t i = 0; i + 1 < off.size(); ++i) EXPECT_EQ(off[i]["moe"]["shadows"], 0);
}

TEST(TrainMoe, DropPathIsDeterministicAcrossRunsAndLayouts) {
  const std::string cap = " --moe-capacity 0.5 --moe-top-k 1";  // 2 places per expert per sequence
  const auto a = train(cap, 3, "drop_a");
  const auto b = train(cap, 3, "drop_b");
  ASSERT_EQ(a.size(), 4u);
  int64_t dropped = 0;
  for (size_t i = 0; i + 1 < a.size(); ++i) {
    dropped += int64_t(a[i]["moe"]["dropped"]);
    EXPECT_EQ(a[i]["loss"], b[i]["loss"]) << "two serial runs, step " << i;
  }
  EXPECT_GT(dropped, 0) << "capacity 0.5 should drop tokens";
  expect_same_routing(a, b, "two serial runs");
  for (const std::string& layout : {std::string("--dp 2 --ep 2"), std::string("--dp 4 --ep 2")}) {
    const auto v = train(cap + " " + layout, 3, "drop_layout");
    expect_same_routing(a, v, layout);
    expect_same_losses(a, v, layout);
    expect_same_weights_rel(ck("drop_a"), ck("drop_layout"), layout);
  }
}

TEST(TrainMoe, CheckpointResumesAtAnotherLayout) {
  const std::string cap = " --moe-capacity 8";
  const auto serial = train(cap, 6, "serial6");
  train(cap + " --dp 4 --ep 2", 4, "first4");
  const auto rest = train(cap + " --dp 2 --ep 2 --resume " + ck("first4"), 6, "last2");
  ASSERT_EQ(rest.size(), 3u);
  ASSERT_EQ(serial.size(), 7u);
  EXPECT_EQ(rest[0]["step"], 4);
  for (size_t i = 0; i < 2; ++i) {
    const double la = serial[4 + i]["loss"], lb = rest[i]["loss"];
    EXPECT_NEAR(lb, la, 1e-5 * la) << "step " << 4 + i;
  }
  expect_same_weights_rel(ck("serial6"), ck("last2"), "saved at dp 4 ep 2, resumed at dp 2 ep 2");
  // And back into one process.
  const auto one = train(cap + " --resume " + ck("first4"), 6, "one2");
  ASSERT_EQ(one.size(), 3u);
  expect_same_weights_rel(ck("serial6"), ck("one2"), "saved at dp 4 ep 2, resumed in one process");
}

TEST(TrainMoe, BadLayoutsAreRefusedBeforeTraining) {
  struct Case {
    std::string flags, message;
  };
  for (const Case& c :
       {Case{"--moe-experts 3 --dp 2 --ep 2", "not divisible by --ep 2"},
        Case{"--moe-experts 2 --moe-top-k 3", "top-k 3 > experts 2"},
        Case{"--moe-experts 4 --moe-shadow -1", "shadow rows -1"},
        Case{"--moe-experts 4 --dp 3 --ep 2", "--ep 2 does not divide --dp 3"},
        Case{"--moe-experts 4 --dp 2 --ep 2 --zero 1", "ZeRO 0 only"},
        Case{"--dp 2 --ep 2", "--ep 2 needs an MoE model"},
        Case{"--moe-experts 4 --tp 2 --sequence-parallel", "sequence parallelism is not supported"}}) {
    CommandResult r = run_command(braid_bin() + kBase + " --steps 1 " + c.flags);
    EXPECT_NE(r.status, 0) << c.flags << "\n" << r.out;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << c.flags << "\n" << r.out;
    EXPECT_EQ(r.out.find("step"), std::string::npos) << c.flags << ": trained before refusing";
  }
}

TEST(TrainMoe, ClippingNormCountsEveryExpertOnce) {
  // The global gradient norm (logged before clipping) over experts split
  // across ep ranks must equal the one-process norm, without and with a
  // pipeline (DataParallel's and the pipeline hooks' norms).
  const std::string opts = " --moe-capacity 8 --clip 0.05";
  const auto serial = train(opts, 3, "clip_serial");
  ASSERT_EQ(serial.size(), 4u);
  for (const std::string& layout :
       {std::string("--dp 4 --ep 2"), std::string("--dp 2 --ep 2 --pp 2"),
        std::string("--dp 2 --ep 2 --tp 2")}) {
    const auto v = train(opts + " " + layout, 3, "clip_layout");
    ASSERT_EQ(v.size(), serial.size()) << layout;
    for (size_t i = 0; i + 1 < v.size(); ++i) {
      const double a = serial[i]["grad_norm"], b = v[i]["grad_norm"];
      EXPECT_GT(a, 0.05) << "the clip must bite for this to test it";
      EXPECT_NEAR(b, a, 1e-5 * a) << layout << " step " << i;
    }
    expect_same_losses(serial, v, layout);
    expect_same_weights_rel(ck("clip_serial"), ck("clip_layout"), layout);
  }
}
