// braid train gpt in the model-parallel modes the README names, end to end
// with the real binary (BRAID_BIN): the interleaved schedule with
// --virtual-stages runs that many chunks per pipeline rank, --zero 1 shards
// the optimizer over dp beside --tp/--pp, and a job started by `braid run`
// trains as the one the tool starts itself. Each run's losses and final
// weights equal the single-process run's; bad values and combinations are
// refused by name.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "support/multiproc.h"
#include "support/tool.h"
#include "support/weights.h"

namespace {

using braid::testing::braid_bin;
using braid::testing::CommandResult;
using braid::testing::expect_same_losses;
using braid::testing::expect_same_weights;
using braid::testing::run_command;

// A tiny GPT: width 32, 4 heads, 16-byte context, 8 samples a step; by
// default 2 blocks (5 top-level modules: embedding, 2 blocks, final norm,
// head).
const std::string kTiny =
    " train gpt --batch 8 --d-model 32 --heads 4 --context 16 --threads 1 --quiet --steps 5 ";

// AdamW moves every element by about lr (1e-3) a step whatever its
// gradient's size, so a wrong gradient shows at that scale; rounding of
// near-zero gradients moves a few elements by some 1e-6.
constexpr double kWeightTol = 5e-5;

const std::string& dir() {
  static const std::string d = braid::testing::temp_dir("trainmpmodes");
  return d;
}
std::string ck(const std::string& tag) { return dir() + "/" + tag + ".ck"; }

struct TrainRun {
  CommandResult result;
  std::vector<nlohmann::json> log;
};

// `prefix` (a launcher, or nothing) before `braid` kTiny `extra` (and
// --layers 2 unless `extra` sets it), logging to `tag`.jsonl and writing
// the final weights to ck(tag).
TrainRun train(const std::string& extra, const std::string& tag, const std::string& prefix = "") {
  const std::string log = dir() + "/" + tag + ".jsonl";
  TrainRun r;
  const std::string layers = extra.find("--layers") == std::string::npos ? " --layers 2 " : " ";
  r.result = run_command(prefix + braid_bin() + kTiny + extra + layers + "--json-log " + log +
                         " --checkpoint " + ck(tag));
  EXPECT_EQ(r.result.status, 0) << prefix << extra << "\n" << r.result.out;
  r.log = braid::testing::read_json_lines(log);
  return r;
}

// The single-process run, made once.
const TrainRun& serial() {
  static const TrainRun r = train("", "serial");
  return r;
}

// kTiny with 2 blocks and `extra` is refused with a non-zero status and a
// message holding `needle`.
void expect_refused(const std::string& extra, const std::string& needle) {
  CommandResult r = run_command(braid_bin() + kTiny + "--layers 2 " + extra);
  EXPECT_NE(r.status, 0) << extra << "\n" << r.out;
  EXPECT_NE(r.out.find(needle), std::string::npos) << extra << "\n" << r.out;
  EXPECT_EQ(r.out.find("done:"), std::string::npos) << extra << "\n" << r.out;
}

TEST(TrainMpModes, VirtualStagesRunTheirChunksAndMatchSingleProcess) {
  // 4 blocks: 7 modules, so 2 ranks can hold 3 chunks each (6 virtual
  // stages), not the interleaved schedule's default of 2.
  const TrainRun serial4 = train("--layers 4", "serial_l4");
  ASSERT_EQ(serial4.log.size(), 6u);
  const std::string flags =
      "--layers 4 --pp 2 --schedule interleaved --virtual-stages 3 --micro-batches 2 --trace " +
      dir() + "/interleaved.json";
  const TrainRun v = train(flags, "interleaved");
  expect_same_losses(serial4.log, v.log, flags);
  expect_same_weights(ck("serial_l4"), ck("interleaved"), kWeightTol, flags);
  ASSERT_FALSE(v.log.empty());
  EXPECT_EQ(v.log.back()["schedule"], "interleaved");
  EXPECT_EQ(v.log.back()["virtual_stages"], 3);
  // The last step's timeline: each of the 2 ranks ran forwards of its 3
  // chunks, and activations crossed all 6 virtual stages (s4 -> s5).
  std::ifstream t(dir() + "/interleaved.json");
  ASSERT_TRUE(t.good());
  const nlohmann::json trace = nlohmann::json::parse(t);
  std::map<int, std::set<std::string>> chunks;  // rank -> "c0", "c1", "c2"
  bool last_hop = false;
  for (const auto& e : trace["traceEvents"]) {
    if (e.value("ph", "") != "X") continue;
    const std::string name = e["name"];
    if (name.rfind("F m", 0) == 0 && name.find(" c") != std::string::npos)
      chunks[e["tid"].get<int>()].insert(name.substr(name.find(" c") + 1));
    if (std::regex_search(name, std::regex("send act m[0-9]+ s4->s5"))) last_hop = true;
  }
  const std::set<std::string> three = {"c0", "c1", "c2"};
  EXPECT_EQ(chunks, (std::map<int, std::set<std::string>>{{0, three}, {1, three}}))
      << trace.dump();
  EXPECT_TRUE(last_hop) << trace.dump();

  // Bad values and combinations, each refused naming the flag.
  expect_refused("--pp 2 --schedule interleaved --virtual-stages 0",
                 "--virtual-stages: must be a whole number of at least 1, not '0'");
  expect_refused("--pp 2 --schedule interleaved --virtual-stages two",
                 "--virtual-stages: must be a whole number of at least 1, not 'two'");
  expect_refused("--pp 2 --schedule interleaved --virtual-stages 1",
                 "--schedule interleaved needs --virtual-stages >= 2");
  expect_refused("--pp 2 --schedule 1f1b --virtual-stages 2",
                 "--virtual-stages applies to --schedule interleaved only");
  expect_refused("--pp 2 --schedule interleaved --virtual-stages 3",
                 "--pp 2 x --virtual-stages 3 makes 6 pipeline stages, but model gpt has only 5 "
                 "units to cut between them: the embedding, 2 blocks (--layers), the final "
                 "norm and the head");
}

TEST(TrainMpModes, ZeroOneShardsTheOptimizerBesideTpAndPp) {
  ASSERT_EQ(serial().log.size(), 6u);
  for (const std::string layout : {"--dp 2 --tp 2", "--dp 2 --pp 2 --micro-batches 2"}) {
    const TrainRun plain = train(layout, "zero0");
    const TrainRun zero1 = train(layout + " --zero 1", "zero1");
    expect_same_losses(serial().log, zero1.log, layout + " --zero 1");
    expect_same_weights(ck("serial"), ck("zero1"), kWeightTol, layout + " --zero 1");
    ASSERT_FALSE(plain.log.empty());
    ASSERT_FALSE(zero1.log.empty());
    const auto &d0 = plain.log.back(), &d1 = zero1.log.back();
    EXPECT_EQ(d0["zero"], 0) << layout;
    EXPECT_EQ(d1["zero"], 1) << layout;
    // World rank 0 holds n parameter elements either way; AdamW keeps two
    // f32 slots for each element it updates: all n without ZeRO, under
    // ZeRO-1 its chunk of the one bucket (under 1 MiB), padded to a
    // multiple of dp = 2: the first ⌈n/2⌉.
    const int64_t bytes = d1["rank0_param_bytes"];
    EXPECT_EQ(int64_t(d0["rank0_param_bytes"]), bytes) << layout;
    ASSERT_GT(bytes, 0) << layout;
    ASSERT_LT(bytes, int64_t(1) << 20) << layout;
    const int64_t n = bytes / 4;
    EXPECT_EQ(int64_t(d0["rank0_optim_bytes"]), 2 * 4 * n) << layout;
    EXPECT_EQ(int64_t(d1["rank0_optim_bytes"]), 2 * 4 * ((n + 1) / 2)) << layout << " --zero 1";
  }
  // At --tp 1 --pp 1 (no pipeline: nn::Trainer's loop) every ZeRO stage
  // runs and equals the serial run; ZeRO-3 holds half the parameters.
  const TrainRun zero3 = train("--dp 2 --tp 1 --pp 1 --zero 3", "zero3");
  expect_same_losses(serial().log, zero3.log, "--dp 2 --tp 1 --pp 1 --zero 3");
  expect_same_weights(ck("serial"), ck("zero3"), kWeightTol, "--dp 2 --tp 1 --pp 1 --zero 3");
  ASSERT_FALSE(zero3.log.empty());
  EXPECT_EQ(zero3.log.back()["zero"], 3);
  // ZeRO-2 and -3 shard what tensor and pipeline parallelism already split.
  expect_refused("--tp 2 --zero 2",
                 "--zero 2 with --dp 1 --tp 2 --pp 1: beside --tp or --pp ZeRO 0 or 1");
  expect_refused("--tp 1 --zero 4", "--zero: Value 4 not in range 0 to 3");
  expect_refused("--tp 1 --pp 1 --dp 2 --trace t.json",
                 "--trace writes a pipeline's timeline, and --tp 1 --pp 1 runs none");
}

TEST(TrainMpModes, BraidRunStartsTheJobAsTheToolDoesItself) {
  ASSERT_EQ(serial().log.size(), 6u);
  const std::string flags = "--tp 2 --pp 2 --micro-batches 2";
  const TrainRun self = train(flags, "self");
  const TrainRun launched = train(flags, "launched", braid_bin() + " run -n 4 -- ");
  expect_same_losses(serial().log, launched.log, "braid run -n 4 -- " + flags);
  expect_same_losses(self.log, launched.log, "braid run -n 4 -- " + flags + " vs self-started");
  expect_same_weights(ck("serial"), ck("launched"), kWeightTol, "braid run -n 4 -- " + flags);
  expect_same_weights(ck("self"), ck("launched"), kWeightTol,
                      "braid run -n 4 -- " + flags + " vs self-started");
  ASSERT_FALSE(launched.log.empty());
  const auto& done = launched.log.back();
  EXPECT_EQ(done["dp"], 1);
  EXPECT_EQ(done["tp"], 2);
  EXPECT_EQ(done["pp"], 2);
  EXPECT_EQ(launched.log.front()["compute_s"].size(), 4u);
  // Only world rank 0 reports: one done line for the job.
  const std::string& out = launched.result.out;
  const size_t at = out.find("done: gpt 5 steps on dp 1 x tp 2 x pp 2");
  EXPECT_NE(at, std::string::npos) << out;
  EXPECT_EQ(out.find("done:", at + 1), std::string::npos) << out;
}

}  // namespace
