// braid train gpt --tp/--pp with the flags that once were one-process only,
// end to end with the real binary (BRAID_BIN): --accum runs accumulation
// rounds of the whole schedule, --recompute recomputes every block's
// activations, --save-init writes the serial model's weights from any
// layout and --init-from loads them into any layout; each run's losses
// and final weights equal the single-process run's with the same flags.
#include <gtest/gtest.h>

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
using braid::testing::run_command;

// A tiny GPT with dropout on: 2 blocks, width 32, 4 heads, 16-byte
// context, 8 samples a step.
const std::string kTiny =
    " train gpt --batch 8 --layers 2 --d-model 32 --heads 4 --context 16 --dropout 0.1"
    " --threads 1 --quiet --steps 4 ";

// A run's JSON log and the checkpoint of its final weights.
struct TrainRun {
  std::vector<nlohmann::json> log;
  std::string ck;
};

TrainRun train(const std::string& extra, const std::string& tag) {
  static const std::string dir = braid::testing::temp_dir("trainmpflags");
  TrainRun run{{}, dir + "/" + tag + ".ck"};
  const std::string log = dir + "/" + tag + ".jsonl";
  CommandResult r =
      run_command(braid_bin() + kTiny + extra + " --json-log " + log + " --checkpoint " + run.ck);
  EXPECT_EQ(r.status, 0) << extra << "\n" << r.out;
  run.log = braid::testing::read_json_lines(log);
  return run;
}

// 4 steps and the done record in each log, with the same losses, and the
// same final weights. AdamW moves every element by about lr (1e-3) a step
// whatever its gradient's size, so a wrong gradient shows at that scale;
// rounding of near-zero gradients moves a few elements by some 1e-6.
void expect_same_run(const TrainRun& a, const TrainRun& b, const std::string& what) {
  ASSERT_EQ(a.log.size(), 5u) << what;
  braid::testing::expect_same_losses(a.log, b.log, what);
  braid::testing::expect_same_weights(a.ck, b.ck, 5e-5, what);
}

TEST(TrainMpFlags, AccumAndRecomputeMatchSingleProcess) {
  const auto serial = train("--accum 2", "serial_accum");
  for (const std::string flags :
       {"--tp 2 --accum 2", "--pp 2 --schedule 1f1b --micro-batches 2 --accum 2",
        "--pp 2 --schedule interleaved --micro-batches 2 --accum 2",
        "--dp 2 --pp 2 --schedule gpipe --micro-batches 2 --accum 2"})
    expect_same_run(serial, train(flags, "accum"), flags);

  const auto serial_rc = train("--recompute", "serial_rc");
  for (const std::string flags :
       {"--tp 2 --pp 2 --micro-batches 2 --recompute", "--tp 2 --sequence-parallel --recompute"})
    expect_same_run(serial_rc, train(flags, "recompute"), flags);

  // Accumulation rounds that do not split the batch are refused by name.
  CommandResult r = run_command(braid_bin() + kTiny + "--pp 2 --micro-batches 4 --accum 4");
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("--batch 8 does not split into --dp 1 copies of --accum 4 rounds of "
                       "--micro-batches 4"),
            std::string::npos)
      << r.out;
}

TEST(TrainMpFlags, InitialWeightsTravelBetweenLayouts) {
  const std::string dir = braid::testing::temp_dir("trainmpinit");
  // The serial model's initial weights at seed 1, written in one process
  // and at (1, 2, 2): the same tensors, bit for bit.
  train("--seed 1 --save-init " + dir + "/serial.bin", "save_serial");
  train("--seed 1 --tp 2 --pp 2 --micro-batches 2 --save-init " + dir + "/mp.bin", "save_mp");
  const braid::Checkpoint a = braid::load_checkpoint(dir + "/serial.bin");
  const braid::Checkpoint b = braid::load_checkpoint(dir + "/mp.bin");
  size_t models = 0;
  for (const auto& [name, t] : a.tensors) {
    if (name.rfind("model/", 0) != 0) continue;
    ++models;
    auto it = b.tensors.find(name);
    ASSERT_NE(it, b.tensors.end()) << name;
    ASSERT_EQ(it->second.shape(), t.shape()) << name;
    for (int64_t i = 0; i < t.numel(); ++i)
      ASSERT_EQ(it->second.f32()[i], t.f32()[i]) << name << "[" << i << "]";
  }
  EXPECT_GT(models, 10u);

  // Loaded at seed 2 (its data order and dropout), in one process and in
  // other layouts: the same losses, and not those of seed 2's own weights.
  const auto own = train("--seed 2", "own").log;
  const TrainRun serial = train("--seed 2 --init-from " + dir + "/serial.bin", "init_serial");
  ASSERT_FALSE(own.empty());
  ASSERT_FALSE(serial.log.empty());
  EXPECT_GT(std::abs(double(own[0]["loss"]) - double(serial.log[0]["loss"])), 1e-4);
  for (const std::string flags : {"--tp 2 --pp 2 --micro-batches 2", "--dp 2 --tp 2"})
    expect_same_run(serial, train("--seed 2 --init-from " + dir + "/mp.bin " + flags, "init"),
                    flags);

  // A checkpoint of another model's shapes is refused, naming the tensor.
  CommandResult w = run_command(braid_bin() +
                                " train gpt --batch 8 --layers 2 --d-model 64 --heads 4 --context 16"
                                " --steps 1 --quiet --save-init " + dir + "/wide.bin");
  ASSERT_EQ(w.status, 0) << w.out;
  CommandResult r = run_command(braid_bin() + kTiny + "--tp 2 --init-from " + dir + "/wide.bin");
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("--init-from " + dir + "/wide.bin: model/"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("the model's is"), std::string::npos) << r.out;
}

}  // namespace
