// braid train dlrm --embeddings sharded, end to end with the real binary
// (BRAID_BIN, real forked ranks): the DLRM with its tables sharded over 2,
// 3 and 4 ranks table-, row- and column-wise (and as --shard auto plans),
// its MLPs data parallel, equals the single-process run with the same
// row-wise table optimizer (--table-optimizer) and global batch: every
// step's loss and every final parameter (tables, their row-wise Adagrad
// state and the MLPs, from the checkpoints, which share the serial layout)
// within 1e-5 relative. A checkpoint written at one world size and
// sharding resumes at another (and in one process) on the same
// trajectory. Each rank holds 1/ranks of the tables (+5%), and a table
// set over the per-rank limit when replicated trains sharded. Bad plans are
// refused before any rank starts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "braid/checkpoint.h"
#include "support/multiproc.h"
#include "support/tool.h"

namespace {

using braid::testing::braid_bin;
using braid::testing::run_command;

// 3 tables of 200 rows, bags of 2 ids, width 12 (divisible by 2, 3, 4);
// batch 60 splits over 2, 3 and 4 ranks.
const std::string kSmall =
    " train dlrm --samples 4096 --test-samples 600 --batch 60 --features 3 "
    "--rows 200 --bag 2 --dim 12 --threads 1 --quiet";
constexpr size_t kSteps = 12;

struct TrainRun {
  std::vector<nlohmann::json> log;
  braid::Checkpoint ck;
};

TrainRun train(const std::string& extra, const std::string& dir, const std::string& name) {
  const std::string log = dir + "/" + name + ".jsonl", ck = dir + "/" + name + ".ckpt";
  auto r = run_command(braid_bin() + kSmall + " --steps 12" + extra + " --json-log " + log + " --checkpoint " +
                       ck + " 2>&1");
  EXPECT_EQ(r.status, 0) << extra << ": " << r.out;
  TrainRun out;
  out.log = braid::testing::read_json_lines(log);
  if (r.status == 0) out.ck = braid::load_checkpoint(ck);
  return out;
}

// Every model/ and optim/ tensor of `want` is in `got` at the same shape,
// each within 1e-5 of the tensor's largest magnitude.
void expect_same_state(const braid::Checkpoint& want, const braid::Checkpoint& got,
                       const std::string& what) {
  size_t compared = 0;
  for (const auto& [name, a] : want.tensors) {
    if (name.rfind("model/", 0) != 0 && name.rfind("optim/", 0) != 0) continue;
    auto it = got.tensors.find(name);
    if (it == got.tensors.end()) {
      ADD_FAILURE() << what << ": no " << name;
      continue;
    }
    const braid::Tensor& b = it->second;
    ASSERT_EQ(a.shape(), b.shape()) << what << ": " << name;
    if (a.dtype() != braid::DType::kF32) continue;
    double scale = 0, diff = 0;
    for (int64_t i = 0; i < a.numel(); ++i) {
      scale = std::max(scale, double(std::fabs(a.f32()[i])));
      diff = std::max(diff, double(std::fabs(a.f32()[i] - b.f32()[i])));
    }
    EXPECT_LE(diff, 1e-5 * scale) << what << ": " << name;
    ++compared;
  }
  // 3 tables, bottom MLP 2 layers and top 3 (weight and bias), momentum.
  EXPECT_GE(compared, size_t(3 + 2 * 10)) << what;
}

void expect_same_losses(const std::vector<nlohmann::json>& want,
                        const std::vector<nlohmann::json>& got, size_t first, size_t count,
                        const std::string& what) {
  ASSERT_GE(want.size(), first + count) << what;
  ASSERT_GE(got.size(), count) << what;
  for (size_t i = 0; i < count; ++i) {
    ASSERT_EQ(got[i]["step"], want[first + i]["step"]) << what;
    const double a = want[first + i]["loss"], b = got[i]["loss"];
    EXPECT_NEAR(b, a, 1e-5 * a) << what << ", step " << first + i;
  }
}

}  // namespace

TEST(TrainDlrmHybrid, ShardedEqualsSerialAtEveryWorldAndSharding) {
  const std::string dir = braid::testing::temp_dir("dlrm_hybrid");
  const TrainRun serial = train(" --table-optimizer adagrad", dir, "serial");
  ASSERT_EQ(serial.log.size(), kSteps + 1);
  EXPECT_EQ(serial.log.back()["event"], "done");
  // Row-wise Adagrad state and the MLPs' momentum are in the checkpoint.
  ASSERT_TRUE(serial.ck.tensors.count("optim/emb.0.weight/rowwise_sum"));
  EXPECT_LT(double(serial.log.back()["test_log_loss"]), double(serial.log.front()["loss"]));
  for (const char* world : {"2", "3", "4"})
    for (const char* shard : {"table", "row", "column", "auto"}) {
      const std::string what = std::string("--dp ") + world + " --shard " + shard;
      const TrainRun h = train(" --table-optimizer adagrad --embeddings sharded --dp " +
                              std::string(world) + " --shard " + shard,
                          dir, std::string("h") + world + shard);
      ASSERT_EQ(h.log.size(), kSteps + 1) << what;
      expect_same_losses(serial.log, h.log, 0, kSteps, what);
      expect_same_state(serial.ck, h.ck, what);
      const auto& d = h.log.back();
      EXPECT_EQ(d["dp"], std::stoi(world)) << what;
      EXPECT_EQ(d["plan"].size(), 3u) << what;
      EXPECT_NEAR(double(d["test_log_loss"]), double(serial.log.back()["test_log_loss"]),
                  1e-5 * double(serial.log.back()["test_log_loss"]))
          << what;
    }
}

// Row-wise SGD, and gradient accumulation (micro-batches on each rank).
TEST(TrainDlrmHybrid, RowwiseSgdAndAccumulationEqualSerial) {
  const std::string dir = braid::testing::temp_dir("dlrm_hybrid_sgd");
  const TrainRun serial = train(" --table-optimizer sgd", dir, "serial");
  for (const std::string layout : {" --dp 2 --shard row", " --dp 3 --shard column",
                                   " --dp 2 --shard table --accum 3"}) {
    const TrainRun h = train(" --table-optimizer sgd --embeddings sharded" + layout, dir, "h");
    ASSERT_EQ(h.log.size(), kSteps + 1) << layout;
    expect_same_losses(serial.log, h.log, 0, kSteps, layout);
    expect_same_state(serial.ck, h.ck, layout);
  }
  // Without --table-optimizer the tables are trained by momentum SGD with
  // dense gradients: a different trajectory, so the comparison can fail.
  const TrainRun dense = train("", dir, "dense");
  double most = 0;
  for (size_t i = 0; i < kSteps; ++i)
    most = std::max(most, std::fabs(double(dense.log[i]["loss"]) - double(serial.log[i]["loss"])));
  EXPECT_GT(most, 1e-4);
}

TEST(TrainDlrmHybrid, CheckpointResumesAtAnotherWorldSize) {
  const std::string dir = braid::testing::temp_dir("dlrm_hybrid_resume");
  const std::string opt = " --table-optimizer adagrad";
  const TrainRun serial = train(opt, dir, "serial");
  // 6 steps at 2 ranks, column-wise; then on to 12 at 3 ranks row-wise, at
  // 4 ranks by auto's plan, and in one process.
  auto r = run_command(braid_bin() + kSmall + opt + " --embeddings sharded --dp 2 --shard "
                       "column --steps 6 --checkpoint " + dir + "/half.ckpt 2>&1");
  ASSERT_EQ(r.status, 0) << r.out;
  for (const std::string next : {" --embeddings sharded --dp 3 --shard row",
                                 " --embeddings sharded --dp 4 --shard auto", ""}) {
    const TrainRun h = train(opt + next + " --resume " + dir + "/half.ckpt", dir, "resumed");
    ASSERT_EQ(h.log.size(), kSteps - 6 + 1) << next;
    expect_same_losses(serial.log, h.log, 6, kSteps - 6, "resumed" + next);
    expect_same_state(serial.ck, h.ck, "resumed" + next);
  }
}

// Each rank holds 1/ranks of the tables (+5%): 8 equal tables over 4
// ranks by every sharding, and over 3 ranks by auto (which splits the
// tables table-wise placement cannot balance). Row-wise Adagrad's state
// (one float per row) is counted apart: a column-wise table keeps it whole
// on each of its column shards.
TEST(TrainDlrmHybrid, EachRankHoldsItsShareOfTheTables) {
  const std::string dir = braid::testing::temp_dir("dlrm_hybrid_mem");
  const std::string job = " train dlrm --steps 3 --samples 2048 --test-samples 240 --batch 48 "
                          "--features 8 --rows 1000 --dim 12 --threads 1 --quiet "
                          "--embeddings sharded --table-optimizer adagrad --json-log " + dir +
                          "/log.jsonl";
  const int64_t total = 8 * 1000 * 12 * 4;
  for (const std::string layout : {" --dp 4 --shard table", " --dp 4 --shard row",
                                   " --dp 4 --shard column", " --dp 3 --shard auto"}) {
    auto r = run_command(braid_bin() + job + layout + " 2>&1");
    ASSERT_EQ(r.status, 0) << layout << ": " << r.out;
    const auto log = braid::testing::read_json_lines(dir + "/log.jsonl");
    const auto& d = log.back();
    ASSERT_EQ(d["event"], "done") << layout;
    EXPECT_EQ(int64_t(d["table_bytes_total"]), total) << layout;
    const auto per = d["table_bytes_per_rank"].get<std::vector<int64_t>>();
    const int world = layout.find("--dp 3") != std::string::npos ? 3 : 4;
    ASSERT_EQ(per.size(), size_t(world)) << layout;
    int64_t sum = 0;
    for (int64_t b : per) {
      EXPECT_LE(double(b), 1.05 * double(total) / world) << layout;
      sum += b;
    }
    EXPECT_EQ(sum, total) << layout;
    // Row state: a table's rows once, or once per column shard.
    const auto state = d["row_state_bytes_per_rank"].get<std::vector<int64_t>>();
    int64_t state_sum = 0;
    for (int64_t b : state) state_sum += b;
    const int64_t columns = layout.find("column") != std::string::npos ? 8 * 3 : 0;
    if (layout.find("auto") == std::string::npos)
      EXPECT_EQ(state_sum, (8 + columns) * 1000 * 4) << layout;
    else
      EXPECT_GE(state_sum, 8 * 1000 * 4) << layout;
  }
}

// Tables that do not fit one rank's --table-memory-limit replicated train
// sharded over 2 ranks; over the limit even sharded, the plan is refused.
TEST(TrainDlrmHybrid, TablesOverOneRanksLimitTrainSharded) {
  const std::string dir = braid::testing::temp_dir("dlrm_hybrid_limit");
  // 8 tables × 4000 rows × 16 × 4 bytes = 1.95 MiB (+ 125 KiB row state).
  const std::string job = " train dlrm --steps 3 --samples 2048 --test-samples 200 --batch 32 "
                          "--features 8 --rows 4000 --dim 16 --threads 1 --quiet "
                          "--table-optimizer adagrad --json-log " + dir + "/log.jsonl";
  auto one = run_command(braid_bin() + job + " --embeddings sharded --dp 1 --table-memory-limit 1.2 2>&1");
  EXPECT_NE(one.status, 0);
  EXPECT_NE(one.out.find("--table-memory-limit"), std::string::npos) << one.out;
  auto two = run_command(braid_bin() + job + " --embeddings sharded --dp 2 --table-memory-limit 1.2 2>&1");
  ASSERT_EQ(two.status, 0) << two.out;
  const auto d = braid::testing::read_json_lines(dir + "/log.jsonl").back();
  for (int64_t b : d["table_bytes_per_rank"].get<std::vector<int64_t>>())
    EXPECT_LE(b, int64_t(1.2 * 1048576));
}

TEST(TrainDlrmHybrid, BadPlansAreRefusedBeforeAnyRankStarts) {
  const std::string job =
      braid_bin() + " train dlrm --steps 2 --samples 512 --test-samples 120 --batch 24 "
                    "--features 3 --threads 1 --embeddings sharded";
  struct Case {
    std::string args, says;
  };
  for (const Case& c : std::vector<Case>{
           {" --rows 200 --dp 3 --shard column --dim 16", "does not divide into 3"},
           {" --rows 3 --dp 4 --shard row", "fewer than the 4 ranks"},
           {" --rows 200 --dp 2 --table-memory-limit 0.01", "over the limit"},
           {" --rows 200 --dp 2 --clip 1", "--clip"},
           {" --rows 200 --dp 2 --shard diagonal", "--shard"},
           {" --rows 200 --dp 2 --table-optimizer adam", "--table-optimizer"},
           {" --rows 200 --dp 2 --auto", "use --shard auto"},
       }) {
    auto r = run_command(job + c.args + " 2>&1");
    EXPECT_NE(r.status, 0) << c.args;
    EXPECT_NE(r.out.find(c.says), std::string::npos) << c.args << ": " << r.out;
    // No rank got as far as training: rank 0's banner never came.
    EXPECT_EQ(r.out.find("tables sharded"), std::string::npos) << c.args << ": " << r.out;
  }
  // The parameter server keeps its tables on the servers.
  auto ps = run_command(braid_bin() + " ps train dlrm --steps 2 --embeddings sharded 2>&1");
  EXPECT_NE(ps.status, 0);
  EXPECT_NE(ps.out.find("--server-rule"), std::string::npos) << ps.out;
  // Replicated tables with row-wise optimizers are the one-process reference only.
  auto r = run_command(braid_bin() + " train dlrm --steps 2 --dp 2 --table-optimizer sgd 2>&1");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--embeddings sharded"), std::string::npos) << r.out;
}
