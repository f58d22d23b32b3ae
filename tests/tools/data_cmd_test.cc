// braid data click, end to end with the real binary (BRAID_BIN): the file
// holds every train and test sample of the click data its flags name, row
// for row as the library's ClickData gathers them, with the flags and the
// test split's log-loss floor as meta; the defaults are train dlrm's; bad
// flags are refused by name and nothing is written.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "braid/checkpoint.h"
#include "braid/data.h"
#include "support/multiproc.h"
#include "support/tool.h"

namespace {

using braid::testing::braid_bin;
using braid::testing::run_command;

// Every sample of `d` as ClickData::gather writes them.
void gather_all(const braid::nn::ClickData& d, braid::Tensor& x, braid::Tensor& y) {
  std::vector<int64_t> idx(size_t(d.size()));
  std::iota(idx.begin(), idx.end(), int64_t(0));
  d.gather(idx.data(), d.size(), x, y);
}

void expect_split(const braid::Checkpoint& ck, const braid::nn::ClickData& d,
                  const std::string& split) {
  braid::Tensor x, y;
  gather_all(d, x, y);
  const auto cx = ck.tensors.find(split + "/x"), cy = ck.tensors.find(split + "/y");
  ASSERT_NE(cx, ck.tensors.end()) << split;
  ASSERT_NE(cy, ck.tensors.end()) << split;
  EXPECT_EQ(cx->second.shape(), x.shape()) << split;
  EXPECT_EQ(cx->second.dtype(), braid::DType::kF32) << split;
  EXPECT_EQ(cy->second.shape(), y.shape()) << split;
  EXPECT_EQ(cy->second.dtype(), braid::DType::kI32) << split;
  ASSERT_EQ(cx->second.nbytes(), x.nbytes()) << split;
  ASSERT_EQ(cy->second.nbytes(), y.nbytes()) << split;
  EXPECT_EQ(std::memcmp(cx->second.raw(), x.raw(), x.nbytes()), 0) << split << " x differs";
  EXPECT_EQ(std::memcmp(cy->second.raw(), y.raw(), y.nbytes()), 0) << split << " y differs";
}

}  // namespace

TEST(DataClick, WritesTheSamplesTrainDlrmTrainsOn) {
  const std::string dir = braid::testing::temp_dir("data_click");
  const std::string file = dir + "/click.ckpt";
  auto r = run_command(braid_bin() +
                       " data click --samples 600 --test-samples 150 --features 3 --rows 50 "
                       "--bag 2 --dense 5 --zipf 0.8 --data-seed 7 --out " + file + " 2>&1");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("600 train and 150 test samples"), std::string::npos) << r.out;
  const braid::Checkpoint ck = braid::load_checkpoint(file);
  const braid::nn::ClickConfig c{.samples = 600, .test_samples = 150, .dense = 5, .features = 3,
                                 .rows = 50, .bag = 2, .zipf = 0.8, .seed = 7};
  const braid::nn::ClickData train(c, "train"), test(c, "test");
  expect_split(ck, train, "train");
  expect_split(ck, test, "test");
  EXPECT_EQ(ck.tensors.size(), 4u);
  EXPECT_EQ(ck.meta.at("features"), "3");
  EXPECT_EQ(ck.meta.at("rows"), "50");
  EXPECT_EQ(ck.meta.at("bag"), "2");
  EXPECT_EQ(ck.meta.at("dense"), "5");
  EXPECT_EQ(ck.meta.at("samples"), "600");
  EXPECT_EQ(ck.meta.at("test_samples"), "150");
  EXPECT_EQ(ck.meta.at("data_seed"), "7");
  EXPECT_DOUBLE_EQ(std::stod(ck.meta.at("zipf")), 0.8);
  EXPECT_DOUBLE_EQ(std::stod(ck.meta.at("best_log_loss")), test.best_log_loss());
  EXPECT_DOUBLE_EQ(std::stod(ck.meta.at("base_log_loss")), test.base_log_loss());
}

// Without data flags: train dlrm's defaults (braid/data.h's ClickConfig).
TEST(DataClick, DefaultsAreTrainDlrms) {
  const std::string dir = braid::testing::temp_dir("data_click_defaults");
  const std::string file = dir + "/click.ckpt";
  auto r = run_command(braid_bin() + " data click --quiet --out " + file + " 2>&1");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out, "");
  const braid::Checkpoint ck = braid::load_checkpoint(file);
  const braid::nn::ClickConfig c;
  EXPECT_EQ(ck.meta.at("samples"), std::to_string(c.samples));
  EXPECT_EQ(ck.meta.at("test_samples"), std::to_string(c.test_samples));
  EXPECT_EQ(ck.meta.at("rows"), std::to_string(c.rows));
  EXPECT_EQ(ck.meta.at("features"), std::to_string(c.features));
  const braid::nn::ClickData test(c, "test");
  expect_split(ck, test, "test");
}

TEST(DataClick, RefusesBadFlagsByNameAndWritesNothing) {
  const std::string dir = braid::testing::temp_dir("data_click_bad");
  const std::string file = dir + "/click.ckpt";
  for (const auto& [flags, word] : std::vector<std::pair<std::string, std::string>>{
           {"--rows 0 --out " + file, "rows"},
           {"--zipf -1 --out " + file, "zipf"},
           {"--features 0 --out " + file, "features"},
           {"--samples 100", "--out"},
           {"--dim 8 --out " + file, "--dim"}}) {
    auto r = run_command(braid_bin() + " data click " + flags + " 2>&1");
    EXPECT_NE(r.status, 0) << flags;
    EXPECT_NE(r.out.find(word), std::string::npos) << flags << ": " << r.out;
    EXPECT_FALSE(std::filesystem::exists(file)) << flags;
  }
  auto r = run_command(braid_bin() + " data 2>&1");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("click"), std::string::npos) << r.out;
}
