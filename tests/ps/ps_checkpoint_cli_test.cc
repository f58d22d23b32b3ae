// Parameter-server checkpoints end to end with the real binary (BRAID_BIN):
// under BSP, a braid ps train dlrm job that stops after 4 steps and resumes
// from its servers' shards trains exactly as one that ran 8 steps straight
// (every step's loss and every final weight, tables included), for SGD with
// momentum and for Adam (ASP: from the weights saved once every worker
// finished the step), also resumed in another placement, with another
// server count (the shards re-cut), with another worker count (the same
// global batches in other shares) or from a step directory written by
// --save-every. Damaged or mismatched checkpoints are
// refused with an error naming the file and what differs.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "braid/checkpoint.h"
#include "support/multiproc.h"
#include "support/tool.h"
#include "support/weights.h"

namespace {

using braid::testing::braid_bin;
using braid::testing::read_json_lines;
using braid::testing::run_command;
using Log = std::vector<nlohmann::json>;
namespace fs = std::filesystem;

const std::string kBase =
    " ps train dlrm --batch 64 --threads 1 --quiet --samples 4096 --test-samples 1024 "
    "--features 4 --rows 300 --workers 2";
const std::string kJob = kBase + " --dim 8 --servers 2 --consistency bsp";

// Runs kJob plus `args` for `steps` steps; its log, final weights in
// dir/name.ckpt.
Log run(const std::string& dir, const std::string& name, int steps, const std::string& args) {
  auto r = run_command(braid_bin() + kJob + " --steps " + std::to_string(steps) + " " + args +
                       " --json-log " + dir + "/" + name + ".jsonl --checkpoint " + dir + "/" +
                       name + ".ckpt");
  EXPECT_EQ(r.status, 0) << args << "\n" << r.out;
  return read_json_lines(dir + "/" + name + ".jsonl");
}

// Runs kBase plus `args`, then `job` (kJob's other flags), which must fail;
// its output.
std::string refused(const std::string& args,
                    const std::string& job = " --dim 8 --servers 2 --consistency bsp") {
  auto r = run_command(braid_bin() + kBase + " " + args + job);
  EXPECT_NE(r.status, 0) << args << "\n" << r.out;
  return r.out;
}

// `rest` (steps 4..7, then done) against `full` (steps 0..7, then done).
void expect_same_training(const Log& full, const Log& rest, const std::string& what) {
  ASSERT_EQ(full.size(), 9u) << what;
  ASSERT_EQ(rest.size(), 5u) << what;
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(rest[i]["step"], full[4 + i]["step"]) << what;
    const double a = full[4 + i]["loss"], b = rest[i]["loss"];
    EXPECT_NEAR(b, a, 1e-6 * std::fabs(a)) << what << ", step " << 4 + i;
  }
  EXPECT_EQ(rest.back()["resumed_at"], 4) << what;
  EXPECT_NEAR(double(rest.back()["test_log_loss"]), double(full.back()["test_log_loss"]), 1e-6)
      << what;
}

// Every model tensor of two final-weight checkpoints within 1e-6.
void expect_same_weights(const std::string& pa, const std::string& pb, const std::string& what) {
  size_t tables = 0;
  const auto diffs = braid::testing::weight_diffs(pa, pb);
  for (const auto& [name, worst] : diffs) {
    EXPECT_LE(worst, 1e-6) << what << ": " << name;
    if (name.find("emb.") != std::string::npos) ++tables;
  }
  EXPECT_EQ(tables, 4u) << what;
  EXPECT_GT(diffs.size(), tables) << what;
}

// Straight 8 steps saving every 4; 4 steps, stopped; resumed from the stop
// (with `resume_args`) and from the straight run's step-4 directory.
void check_resume(const std::string& rule, const std::string& resume_args) {
  const std::string dir = braid::testing::temp_dir("ps_ckpt_" + rule);
  const std::string r = " --server-rule " + rule + " --momentum 0.9";
  const Log full = run(dir, "full", 8, r + " --save-dir " + dir + "/every --save-every 4");
  EXPECT_TRUE(fs::exists(dir + "/every/step-00000004/shard-1.ckpt"));
  EXPECT_TRUE(fs::exists(dir + "/every/step-00000008/shard-0.ckpt"));
  const Log half = run(dir, "half", 4, r + " --save-dir " + dir + "/stop");
  ASSERT_EQ(half.size(), 5u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(half[i]["loss"], full[i]["loss"]) << "step " << i;

  const Log rest = run(dir, "rest", 8, r + " --resume " + dir + "/stop " + resume_args);
  expect_same_training(full, rest, rule + " resumed from the stop");
  expect_same_weights(dir + "/full.ckpt", dir + "/rest.ckpt", rule + " resumed from the stop");

  const Log mid = run(dir, "mid", 8, r + " --resume " + dir + "/every/step-00000004");
  expect_same_training(full, mid, rule + " resumed from --save-every's step 4");
  expect_same_weights(dir + "/full.ckpt", dir + "/mid.ckpt", rule + " from step 4");
}

TEST(PsCheckpoint, BspResumeEqualsStraightRunWithSgdMomentum) { check_resume("sgd", ""); }

TEST(PsCheckpoint, BspResumeEqualsStraightRunWithAdamInAnotherPlacement) {
  check_resume("adam", "--placement colocated");
}

TEST(PsCheckpoint, BspResumeWithAnotherServerCountEqualsStraightRun) {
  // Saved by 2 servers; resumed by 3 (every dense slice and table split
  // anew) and by 1 (all shards into one), with Adam: its moments and
  // update counts must follow the elements and rows to their new shards.
  const std::string dir = braid::testing::temp_dir("ps_ckpt_reshard");
  const std::string r = " --server-rule adam --momentum 0.9";
  const Log full = run(dir, "full", 8, r);
  run(dir, "half", 4, r + " --save-dir " + dir + "/s");
  for (const std::string servers : {"3", "1"}) {
    const std::string name = "rest" + servers;
    auto res = run_command(braid_bin() + kBase + " --dim 8 --consistency bsp --steps 8" + r +
                           " --servers " + servers + " --resume " + dir + "/s --json-log " +
                           dir + "/" + name + ".jsonl --checkpoint " + dir + "/" + name +
                           ".ckpt");
    ASSERT_EQ(res.status, 0) << res.out;
    const Log rest = read_json_lines(dir + "/" + name + ".jsonl");
    expect_same_training(full, rest, "resumed by " + servers + " servers");
    expect_same_weights(dir + "/full.ckpt", dir + "/" + name + ".ckpt",
                        "resumed by " + servers + " servers");
  }
}

TEST(PsCheckpoint, BspResumeWithAnotherWorkerCountEqualsStraightRun) {
  // Saved by a job of 2 workers; resumed by 3 and by 1. Each worker pushes
  // its share of the global batch's mean gradient, so the rounds sum the
  // same gradient in other parts: equal up to float rounding (1e-5, where
  // the resumes above hold 1e-6). SGD with momentum: Adam's first steps
  // move an element by about lr whatever its gradient's size, so a rounding
  // of a near-zero gradient would move it by that much.
  const std::string dir = braid::testing::temp_dir("ps_ckpt_workers");
  const std::string r = " --server-rule sgd --momentum 0.9";
  const Log full = run(dir, "full", 8, r);
  ASSERT_EQ(full.size(), 9u);
  run(dir, "half", 4, r + " --save-dir " + dir + "/s");
  for (const int workers : {3, 1}) {
    const std::string name = "rest" + std::to_string(workers);
    SCOPED_TRACE(name);
    std::string job = kJob;
    job.replace(job.find("--workers 2"), 11, "--workers " + std::to_string(workers));
    auto res = run_command(braid_bin() + job + " --steps 8" + r + " --resume " + dir +
                           "/s --json-log " + dir + "/" + name + ".jsonl --checkpoint " + dir +
                           "/" + name + ".ckpt 2>&1");
    ASSERT_EQ(res.status, 0) << res.out;
    const Log rest = read_json_lines(dir + "/" + name + ".jsonl");
    ASSERT_EQ(rest.size(), 5u);
    EXPECT_EQ(rest.back()["workers"], workers);
    EXPECT_EQ(rest.back()["resumed_at"], 4);
    EXPECT_EQ(rest.back()["rounds_closed"], nlohmann::json({8, 8}));
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(rest[i]["step"], 4 + i);
      EXPECT_EQ(rest[i]["loss_workers"], workers) << "step " << 4 + i;
      const double a = full[4 + i]["loss"], b = rest[i]["loss"];
      EXPECT_NEAR(b, a, 1e-5 * std::fabs(a)) << "step " << 4 + i;
    }
    EXPECT_NEAR(double(rest.back()["test_log_loss"]), double(full.back()["test_log_loss"]),
                1e-5);
    size_t tables = 0;
    const auto diffs = braid::testing::weight_diffs(dir + "/full.ckpt", dir + "/" + name + ".ckpt");
    for (const auto& [tensor, worst] : diffs) {
      EXPECT_LE(worst, 1e-5) << tensor;
      tables += tensor.find("emb.") != std::string::npos;
    }
    EXPECT_EQ(tables, 4u);
    EXPECT_GT(diffs.size(), tables);
  }
}

TEST(PsCheckpoint, AspSavesOnceEveryWorkerFinishedAStepAndResumesThere) {
  // ASP has no rounds: step 4 is saved once both workers clocked it, with
  // every push applied by then, which at the job's end are all of them:
  // the saved shards hold the job's final weights. A job resumed there
  // with a vanishing learning rate keeps exactly those weights.
  const std::string dir = braid::testing::temp_dir("ps_ckpt_asp");
  const std::string job = " --dim 8 --servers 2 --consistency asp";
  auto res = run_command(braid_bin() + kBase + job + " --steps 4 --save-dir " + dir +
                         "/s --checkpoint " + dir + "/half.ckpt");
  ASSERT_EQ(res.status, 0) << res.out;
  EXPECT_TRUE(fs::exists(dir + "/s/step-00000004/shard-1.ckpt"));
  res = run_command(braid_bin() + kBase + job + " --steps 6 --lr 1e-30 --resume " + dir +
                    "/s --json-log " + dir + "/rest.jsonl --checkpoint " + dir + "/rest.ckpt");
  ASSERT_EQ(res.status, 0) << res.out;
  const Log rest = read_json_lines(dir + "/rest.jsonl");
  ASSERT_EQ(rest.size(), 3u);
  EXPECT_EQ(rest[0]["step"], 4);
  EXPECT_EQ(rest.back()["resumed_at"], 4);
  EXPECT_EQ(rest.back()["rounds_closed"], nlohmann::json({6, 6}));
  expect_same_weights(dir + "/half.ckpt", dir + "/rest.ckpt", "asp resumed at step 4");
}

TEST(PsCheckpoint, IncompleteStepDirectoryIsSkipped) {
  const std::string dir = braid::testing::temp_dir("ps_ckpt_partial");
  const Log full = run(dir, "full", 8, "");
  run(dir, "half", 4, "--save-dir " + dir + "/s");
  // A newer step whose second shard was never written (a job stopped
  // mid-save): resuming takes step 4.
  fs::create_directories(dir + "/s/step-00000006");
  fs::copy_file(dir + "/s/step-00000004/shard-0.ckpt", dir + "/s/step-00000006/shard-0.ckpt");
  const Log rest = run(dir, "rest", 8, "--resume " + dir + "/s");
  expect_same_training(full, rest, "skipping the incomplete step 6");
}

TEST(PsCheckpoint, DamagedOrMismatchedCheckpointsAreRefused) {
  const std::string dir = braid::testing::temp_dir("ps_ckpt_bad");
  run(dir, "half", 4, "--server-rule adam --save-dir " + dir + "/s");
  const std::string step = dir + "/s/step-00000004";

  // A copy of the step without shard 1: incomplete, named as such.
  const std::string lone = dir + "/lone/step-00000004";
  fs::create_directories(lone);
  fs::copy_file(step + "/shard-0.ckpt", lone + "/shard-0.ckpt");
  std::string out = refused("--steps 8 --server-rule adam --resume " + lone);
  EXPECT_NE(out.find("not shard-0..shard-1.ckpt of the 2 servers that saved it"),
            std::string::npos)
      << out;
  out = refused("--steps 8 --server-rule adam --resume " + dir + "/lone");
  EXPECT_NE(out.find("no step-<N>/ directory with a complete set of shard files"),
            std::string::npos)
      << out;
  out = refused("--steps 8 --server-rule adagrad --resume " + step);
  EXPECT_NE(out.find("update rule adamw, this job's is adagrad"), std::string::npos) << out;
  out = refused("--steps 8 --server-rule adam --resume " + step, " --dim 16 --servers 2");
  EXPECT_NE(out.find("step-00000004/shard-"), std::string::npos) << out;
  EXPECT_NE(out.find("this job"), std::string::npos) << out;
  out = refused("--steps 8 --server-rule adam --seed 7 --resume " + step);
  EXPECT_NE(out.find("seed"), std::string::npos) << out;
  out = refused("--steps 4 --server-rule adam --resume " + step);
  EXPECT_NE(out.find("leaves nothing to train"), std::string::npos) << out;
  out = refused("--steps 8 --resume " + dir + "/nowhere");
  EXPECT_NE(out.find("nowhere: not a directory"), std::string::npos) << out;
  // A save that fails stops the job, naming the directory.
  out = refused("--steps 2 --save-dir /dev/null/ps");
  EXPECT_NE(out.find("creating checkpoint directory /dev/null/ps/step-00000002"),
            std::string::npos)
      << out;
  out = refused("--steps 8 --checkpoint-every 2 --checkpoint " + dir + "/x.ckpt");
  EXPECT_NE(out.find("--save-dir DIR --save-every N"), std::string::npos) << out;

  // One flipped byte in shard 1's payload: its checksum fails, naming the file.
  const std::string shard1 = step + "/shard-1.ckpt";
  {
    std::fstream f(shard1, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-200, std::ios::end);
    char c = 0;
    f.read(&c, 1);
    f.seekp(-200, std::ios::end);
    c = char(c ^ 0x5a);
    f.write(&c, 1);
  }
  out = refused("--steps 8 --server-rule adam --resume " + step);
  EXPECT_NE(out.find("checkpoint " + shard1), std::string::npos) << out;
  EXPECT_NE(out.find("checksum mismatch"), std::string::npos) << out;
}

}  // namespace
