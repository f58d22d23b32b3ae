// braid train gpt --dp/--tp/--pp, end to end with the real binary
// (BRAID_BIN): every layout's losses and final weights equal the
// single-process run's, the JSON records carry every rank's split of each
// step (finite, within the training time, a bubble exactly where there is
// a pipeline) and the pipeline's figures, checkpoints resume across
// layouts, --pp-balance cuts the stages by measured time without changing
// the losses or weights, --print-schedule names every rank,
// and a wrong rank count under a launcher or --tp with dlrm is refused.
// The MLP goes through the same path (parallelize over its spec): --tp 2,
// --pp 3 and --dp 2 --tp 2 --zero 1 equal its single-process run.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/multiproc.h"
#include "support/tool.h"
#include "support/weights.h"

namespace {

using braid::testing::braid_bin;
using braid::testing::expect_same_losses;
using braid::testing::expect_same_weights;
using braid::testing::CommandResult;
using braid::testing::run_command;

// A tiny GPT: 2 blocks, width 32, 4 heads, 16-byte context, 8 samples a step.
const std::string kTiny =
    " train gpt --batch 8 --layers 2 --d-model 32 --heads 4 --context 16 --threads 1 --quiet";

// Final weights of a layout against the serial run's, element by element.
// AdamW moves every element by about lr (1e-3) a step whatever its
// gradient's size, so a wrong gradient shows at that scale; rounding of
// near-zero gradients (the key bias's, ~0 in exact arithmetic) moves a few
// elements by up to ~4e-6 in 7 steps.
constexpr double kWeightTol = 5e-5;

// `braid train` with kTiny for `steps` steps plus `extra`; its JSON log.
// Unless `extra` names a checkpoint, the run's final weights go to ck(tag).
const std::string& dir() {
  static const std::string d = braid::testing::temp_dir("trainmp");
  return d;
}
std::string ck(const std::string& tag) { return dir() + "/" + tag + ".ck"; }
std::vector<nlohmann::json> train(const std::string& extra, int steps, const std::string& tag) {
  std::string log = dir() + "/" + tag + ".jsonl";
  CommandResult r = run_command(braid_bin() + kTiny + " --steps " + std::to_string(steps) + " " +
                                extra + " --json-log " + log +
                                (extra.find("--checkpoint") == std::string::npos
                                     ? " --checkpoint " + ck(tag)
                                     : ""));
  EXPECT_EQ(r.status, 0) << extra << "\n" << r.out;
  return braid::testing::read_json_lines(log);
}

TEST(TrainMp, LayoutsMatchSingleProcessAndReportThePipeline) {
  const auto serial = train("", 5, "serial");  // nn::Trainer in one process
  ASSERT_EQ(serial.size(), 6u);
  struct Layout {
    std::string flags;
    int dp, tp, pp;
  };
  for (const Layout& l : {Layout{"--tp 1 --pp 1", 1, 1, 1}, Layout{"--tp 2", 1, 2, 1},
                          Layout{"--pp 2 --schedule 1f1b", 1, 1, 2},
                          Layout{"--dp 2 --tp 2", 2, 2, 1}}) {
    const auto v = train(l.flags, 5, "layout");
    expect_same_losses(serial, v, l.flags);
    expect_same_weights(ck("serial"), ck("layout"), kWeightTol, l.flags);
    if (v.size() != serial.size()) continue;
    const size_t world = size_t(l.dp * l.tp * l.pp);
    const auto& done = v.back();
    EXPECT_EQ(done["event"], "done") << l.flags;
    const double train_s = done["train_seconds"];
    // Every rank's split of every step: finite, none negative, compute on
    // every rank; communication waits wherever there is another rank; a
    // bubble on every rank of a pipeline and on none without one. The parts
    // are disjoint parts of each step, so per rank they sum to at most the
    // job's training time: all steps on rank 0 (whose clock that is), and
    // on the others every step after the first (the first may start
    // before rank 0's clock does; the others begin after the exchange of
    // the step before, which waits for rank 0).
    for (size_t w = 0; w < world; ++w) {
      double sum = 0, sum_after_first = 0;
      for (size_t i = 0; i + 1 < v.size(); ++i) {
        const std::string at = l.flags + " rank " + std::to_string(w) + " step " + std::to_string(i);
        double step = 0;
        for (const char* k : {"compute_s", "exposed_comm_s", "bubble_s"}) {
          ASSERT_TRUE(v[i][k].is_array()) << at << " " << k;
          ASSERT_EQ(v[i][k].size(), world) << at << " " << k;
          ASSERT_TRUE(v[i][k][w].is_number()) << at << " " << k;
          const double x = v[i][k][w];
          EXPECT_TRUE(std::isfinite(x)) << at << " " << k << " " << x;
          EXPECT_GE(x, 0.0) << at << " " << k;
          step += x;
        }
        EXPECT_GT(double(v[i]["compute_s"][w]), 0.0) << at;
        if (world > 1) {
          EXPECT_GT(double(v[i]["exposed_comm_s"][w]), 0.0) << at;
        }
        if (l.pp == 1) {
          EXPECT_EQ(double(v[i]["bubble_s"][w]), 0.0) << at << ": no pipeline, no bubble";
        } else {
          EXPECT_GT(double(v[i]["bubble_s"][w]), 0.0) << at << ": a pipeline stage reports no bubble";
        }
        sum += step;
        if (i > 0) sum_after_first += step;
      }
      EXPECT_LE(w == 0 ? sum : sum_after_first, train_s)
          << l.flags << " rank " << w << ": the split of its steps exceeds the training time";
    }
    EXPECT_EQ(done["dp"], l.dp);
    EXPECT_EQ(done["tp"], l.tp);
    EXPECT_EQ(done["pp"], l.pp);
    EXPECT_GT(double(done["tokens_per_s"]), 0) << l.flags;
    const double bubble = done["bubble_fraction"];
    EXPECT_GE(bubble, 0) << l.flags;
    EXPECT_LT(bubble, 1) << l.flags;
    EXPECT_EQ(done["bubble_method"], "span") << l.flags << ": one host, one clock";
    // A one-stage pipeline has no communication actions, so no bubble; a
    // two-stage one idles at least before stage 1's first forward.
    if (l.pp == 1) {
      EXPECT_EQ(bubble, 0) << l.flags;
    } else {
      EXPECT_GT(bubble, 0) << l.flags;
    }
    // Measured by the pipeline executor; --tp 1 --pp 1 runs none (nn::
    // Trainer's own loop under data parallelism) and reports null.
    if (l.tp == 1 && l.pp == 1) {
      EXPECT_TRUE(done["peak_activation_bytes"].is_null()) << l.flags;
      continue;
    }
    ASSERT_EQ(done["peak_activation_bytes"].size(), size_t(l.pp)) << l.flags;
    for (const auto& b : done["peak_activation_bytes"]) EXPECT_GT(int64_t(b), 0) << l.flags;
  }
}

TEST(TrainMp, PpBalanceCutsByMeasuredTimeAndMatchesSingleProcess) {
  const auto serial = train("", 4, "serial4");
  std::string log = dir() + "/balance.jsonl";
  CommandResult r = run_command(braid_bin() + kTiny +
                                " --steps 4 --pp 2 --micro-batches 4 --pp-balance --json-log " +
                                log + " --checkpoint " + ck("balance"));
  ASSERT_EQ(r.status, 0) << r.out;
  expect_same_losses(serial, braid::testing::read_json_lines(log), "--pp 2 --pp-balance");
  expect_same_weights(ck("serial4"), ck("balance"), kWeightTol, "--pp 2 --pp-balance");
  // Printed once, by rank 0: the 5 modules (emb, 2 blocks, ln_f, lm_head)
  // cut into 2 stages that together cover them.
  EXPECT_EQ(r.out.find("pp balance:"), r.out.rfind("pp balance:")) << r.out;
  EXPECT_NE(r.out.find("stage 0: layers [0, "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("), predicted "), std::string::npos) << r.out;
  const size_t at = r.out.find("stage 1: layers [");
  ASSERT_NE(at, std::string::npos) << r.out;
  EXPECT_NE(r.out.find(", 5), predicted ", at), std::string::npos) << r.out;

  r = run_command(braid_bin() + kTiny + " --steps 2 --pp-balance");
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("--pp-balance needs more than one pipeline stage"), std::string::npos)
      << r.out;
}

TEST(TrainMp, CheckpointResumesInAnotherLayoutAndTraceIsWritten) {
  const auto serial = train("", 7, "serial7");
  train("--tp 2", 5, "first5");
  const auto rest =
      train("--pp 2 --schedule gpipe --resume " + ck("first5") + " --trace " + dir() + "/trace.json",
            7, "last2");
  ASSERT_EQ(rest.size(), 3u);  // steps 5 and 6, then done
  ASSERT_EQ(serial.size(), 8u);
  EXPECT_EQ(rest[0]["step"], 5);
  for (size_t i = 0; i < 2; ++i) {
    double la = serial[5 + i]["loss"], lb = rest[i]["loss"];
    EXPECT_NEAR(lb, la, 1e-5 * la) << "step " << 5 + i;
  }
  expect_same_weights(ck("serial7"), ck("last2"), kWeightTol, "resumed at --pp 2");
  std::ifstream t(dir() + "/trace.json");
  ASSERT_TRUE(t.good());
  nlohmann::json trace = nlohmann::json::parse(t);
  EXPECT_FALSE(trace["traceEvents"].empty());
}

TEST(TrainMp, PrintScheduleNamesEveryRankAndDoesNotTrain) {
  CommandResult r = run_command(braid_bin() + kTiny +
                                " --dp 2 --tp 2 --pp 2 --schedule interleaved --micro-batches 2"
                                " --print-schedule");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("interleaved: 2 ranks, 2 micro-batches, 2 chunks per rank"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("rank 0 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank 1 |"), std::string::npos) << r.out;
  // Mesh layout: world rank = (d·pp + p)·tp + t.
  EXPECT_NE(r.out.find("pipeline rank 0: world ranks 0 1 4 5\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("pipeline rank 1: world ranks 2 3 6 7\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("done:"), std::string::npos) << r.out;
}

TEST(TrainMp, RefusesAWrongWorldAndDlrmWithTp) {
  CommandResult r = run_command(braid_bin() + " run -n 3 -- " + braid_bin() + kTiny +
                                " --steps 2 --tp 2");
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("--dp 1 --tp 2 --pp 1 needs 2 ranks but the launcher started 3"),
            std::string::npos)
      << r.out;
  r = run_command(braid_bin() + " train dlrm --steps 2 --tp 2");
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("dlrm: tensor parallelism over 2 ranks is not built for the DLRM"),
            std::string::npos)
      << r.out;
}

TEST(TrainMp, TheMlpTrainsInEveryLayoutAsInOneProcess) {
  const std::string mlp = " train mlp --steps 6 --batch 60 --threads 1 --quiet";
  auto run = [&](const std::string& extra, const std::string& tag) {
    const std::string log = dir() + "/" + tag + ".jsonl";
    CommandResult r = run_command(braid_bin() + mlp + " " + extra + " --json-log " + log +
                                  " --checkpoint " + ck(tag));
    EXPECT_EQ(r.status, 0) << extra << "\n" << r.out;
    return braid::testing::read_json_lines(log);
  };
  const auto serial = run("", "mlp_serial");
  ASSERT_EQ(serial.size(), 7u);
  for (const auto& [layout, tag] : std::vector<std::pair<std::string, std::string>>{
           {"--tp 2", "mlp_tp2"},
           {"--pp 3 --micro-batches 3", "mlp_pp3"},
           {"--dp 2 --tp 2 --zero 1", "mlp_dp2tp2"}}) {
    const auto log = run(layout, tag);
    expect_same_losses(serial, log, layout);
    expect_same_weights(ck("mlp_serial"), ck(tag), kWeightTol, layout);
  }
}

}  // namespace
