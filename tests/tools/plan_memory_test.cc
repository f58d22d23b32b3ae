// braid plan's memory per rank on this-machine against braid's own: for
// each layout braid train runs, rank 0's peak tensor storage (the done
// record's peak_tensor_bytes, braid/tensor.h) is within 10% of the
// planner's memory_bytes_per_device for the same model, batch and layout.
// Memory does not depend on load, so this is a plain test, not a benchmark.
// The shape differs from bench/plan_check.sh's on purpose: the planner's
// counts are per element, not fitted to one model.
// Three blocks over two pipeline stages: an uneven cut, which the planner
// makes where braid's partition_layers makes it (this-machine's runtime).
#include <gtest/gtest.h>

#include <string>

#include "support/multiproc.h"
#include "support/tool.h"

namespace {

using braid::testing::braid_bin;
using braid::testing::run_command;

struct Layout {
  const char* name;
  int ranks;
  const char* train;  // braid train's layout flags
  const char* plan;   // braid plan's, the same layout fixed
};

const char* kShape = " --layers 3 --d-model 64 --heads 4 --context 32";
const char* kModel = "gpt:layers=3,hidden=64,heads=4,seq=32,vocab=256";

TEST(PlanMemory, PredictsBraidsPeakTensorBytesWithinTenPercentInEveryLayout) {
  const std::string dir = braid::testing::temp_dir("plan_memory");
  const Layout layouts[] = {
      {"one rank", 1, "", "--tp 1 --pp 1 --dp 1 --mbs 8 --zero 0 --recompute none"},
      {"one rank, recompute", 1, "--recompute",
       "--tp 1 --pp 1 --dp 1 --mbs 8 --zero 0 --recompute full"},
      {"dp 2", 2, "--dp 2", "--tp 1 --pp 1 --dp 2 --mbs 4 --zero 0 --recompute none"},
      {"dp 2, ZeRO-3", 2, "--dp 2 --zero 3",
       "--tp 1 --pp 1 --dp 2 --mbs 4 --zero 3 --recompute none"},
      {"tp 2", 2, "--tp 2",
       "--tp 2 --pp 1 --dp 1 --mbs 8 --zero 0 --recompute none --no-sequence-parallel"},
      {"tp 2, sp, recompute", 2, "--tp 2 --sequence-parallel --recompute",
       "--tp 2 --pp 1 --dp 1 --mbs 8 --zero 0 --recompute full --sequence-parallel"},
      {"pp 2, 1f1b", 2, "--pp 2 --micro-batches 4",
       "--tp 1 --pp 2 --dp 1 --mbs 2 --schedule 1f1b --zero 0 --recompute none"},
  };
  int i = 0;
  for (const Layout& l : layouts) {
    const std::string log = dir + "/run" + std::to_string(i++) + ".jsonl";
    const std::string train = braid_bin() + " train gpt --steps 2 --batch 8 --threads 1 -q" +
                              kShape + " " + l.train + " --json-log " + log;
    auto r = run_command(l.ranks == 1 ? train
                                      : braid_bin() + " run -n " + std::to_string(l.ranks) + " " +
                                            train);
    ASSERT_EQ(r.status, 0) << l.name << "\n" << r.out;
    const auto records = braid::testing::read_json_lines(log);
    ASSERT_FALSE(records.empty()) << l.name;
    const double measured = records.back().at("peak_tensor_bytes").get<double>();
    auto p = run_command(braid_bin() + " plan --model " + kModel +
                         " --cluster this-machine --batch 8 --gpus " + std::to_string(l.ranks) +
                         " " + l.plan + " --json --top 1");
    ASSERT_EQ(p.status, 0) << l.name << "\n" << p.out;
    const auto plan = nlohmann::json::parse(p.out.substr(0, p.out.find('\n')));
    const double predicted = plan.at("memory_bytes_per_device").get<double>();
    EXPECT_GT(measured, 0) << l.name;
    EXPECT_NEAR(predicted / measured, 1.0, 0.10)
        << l.name << ": predicted " << predicted << " B, measured " << measured << " B";
  }
}

}  // namespace
