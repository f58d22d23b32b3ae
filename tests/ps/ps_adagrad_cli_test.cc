// braid ps train --server-rule adagrad end to end with the real binary
// (BRAID_BIN): the servers apply Adagrad (include/braid/ps.h: h += g²;
// w −= lr·g / (√h + eps)) to the BSP mean gradient. Read from the shards
// the servers save after each step (--save-every 1; dense/<key>/w and its
// accumulator dense/<key>/state), against a gradient found another way:
// two one-step plain-SGD jobs from the same start, at lr L1 and L2, give
// w_L1 − w_L2 = (L2 − L1)·g0 and w0 = w_L1 + L1·g0. After step 0, h = g0²
// and w moved by lr·g0/|g0| (not at all where g0 = 0); after step 1, h grew
// by g1² ≥ 0 and w moved by lr·|g1|/√h. And the rule's state is sharded
// with the parameters: the same job over 3 servers ends bit for bit equal.
#include <gtest/gtest.h>

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
using braid::testing::read_json_lines;
using braid::testing::run_command;
using Log = std::vector<nlohmann::json>;

const std::string kJob =
    " ps train mlp --batch 60 --threads 1 --quiet --workers 2 --consistency bsp";

Log run(const std::string& dir, const std::string& name, const std::string& args) {
  auto r = run_command(braid_bin() + kJob + args + " --save-dir " + dir + "/" + name +
                       " --save-every 1 --json-log " + dir + "/" + name + ".jsonl --checkpoint " +
                       dir + "/" + name + ".ckpt 2>&1");
  EXPECT_EQ(r.status, 0) << args << "\n" << r.out;
  return read_json_lines(dir + "/" + name + ".jsonl");
}

// The single server's shard saved after `step` steps.
braid::Checkpoint shard(const std::string& dir, const std::string& name, int step) {
  return braid::load_checkpoint(dir + "/" + name + "/step-0000000" + std::to_string(step) +
                                "/shard-0.ckpt");
}

const float* tensor(const braid::Checkpoint& ck, const std::string& name, int64_t n) {
  const auto it = ck.tensors.find(name);
  if (it == ck.tensors.end() || it->second.numel() != n) return nullptr;
  return it->second.f32();
}

TEST(PsAdagradCli, ServersApplyAdagradToTheBspMeanGradient) {
  const std::string dir = braid::testing::temp_dir("ps_adagrad");
  const Log ada = run(dir, "ada", " --servers 1 --steps 2 --server-rule adagrad --lr 0.001");
  const Log s1 = run(dir, "sgd1", " --servers 1 --steps 1 --server-rule sgd --momentum 0 --lr 0.1");
  const Log s2 = run(dir, "sgd2", " --servers 1 --steps 1 --server-rule sgd --momentum 0 --lr 0.2");
  ASSERT_EQ(ada.size(), 3u);
  ASSERT_EQ(s1.size(), 2u);
  ASSERT_EQ(s2.size(), 2u);
  // The learning rates the servers used (the schedule's, as logged).
  const double a0 = ada[0]["lr"], a1 = ada[1]["lr"], l1 = s1[0]["lr"], l2 = s2[0]["lr"];
  ASSERT_GT(a0, 0.0);
  ASSERT_GT(a1, 0.0);
  ASSERT_GT(l2, l1);

  const braid::Checkpoint w1 = shard(dir, "ada", 1), w2 = shard(dir, "ada", 2),
                          sa = shard(dir, "sgd1", 1), sb = shard(dir, "sgd2", 1);
  EXPECT_EQ(w1.meta.at("ps/rule"), "adagrad");
  EXPECT_EQ(w1.meta.at("ps/slots"), "1");
  int64_t keys = 0, zero = 0, first = 0, second = 0;
  for (const auto& [name, t] : w1.tensors) {
    if (name.size() < 2 || name.compare(name.size() - 2, 2, "/w") != 0) continue;
    const std::string key = name.substr(0, name.size() - 2);
    SCOPED_TRACE(key);
    const int64_t n = t.numel();
    const float *x1 = t.f32(), *h1 = tensor(w1, key + "/state", n), *x2 = tensor(w2, name, n),
                *h2 = tensor(w2, key + "/state", n), *ya = tensor(sa, name, n),
                *yb = tensor(sb, name, n);
    ASSERT_TRUE(h1 && x2 && h2 && ya && yb);
    ++keys;
    for (int64_t i = 0; i < n; ++i) {
      const double g0 = (double(ya[i]) - double(yb[i])) / (l2 - l1);
      const double w0 = double(ya[i]) + l1 * g0;
      if (h1[i] == 0.0f) {
        // No gradient: neither rule moved the element.
        EXPECT_EQ(x1[i], ya[i]) << "element " << i;
        EXPECT_EQ(ya[i], yb[i]) << "element " << i;
        ++zero;
      } else if (std::fabs(g0) > 1e-4) {
        ASSERT_NEAR(std::sqrt(double(h1[i])), std::fabs(g0), 1e-3 * std::fabs(g0) + 1e-7)
            << "element " << i << ": h after step 0 is not g0²";
        ASSERT_NEAR(w0 - double(x1[i]), a0 * (g0 > 0 ? 1 : -1), 1e-3 * a0)
            << "element " << i << ": step 0 did not move w by lr·g0/|g0|";
        ++first;
      }
      // Step 1: h grew by g1², and w moved by lr·|g1|/√h.
      const double d = double(h2[i]) - double(h1[i]), step = double(x1[i]) - double(x2[i]);
      ASSERT_GE(d, -1e-6 * double(h2[i])) << "element " << i << ": h shrank";
      if (d > 1e-2 * double(h2[i]) && h2[i] > 1e-10f) {
        ASSERT_NEAR(step * step * double(h2[i]) / (a1 * a1), d, 1e-3 * double(h2[i]))
            << "element " << i << ": step 1 did not move w by lr·|g1|/√h";
        ++second;
      }
    }
  }
  EXPECT_EQ(keys, 6);  // 3 linear layers, weight and bias
  // Most elements had a gradient at both steps; Fashion-MNIST's blank
  // border pixels give fc1 columns none.
  EXPECT_GT(first, 100000);
  EXPECT_GT(second, 100000);
  EXPECT_GT(zero, 0);

  // The same job over 3 servers: each keeps its slices' accumulators, and
  // every element sees the same mean gradient, so the end is bit-equal.
  run(dir, "ada3", " --servers 3 --steps 2 --server-rule adagrad --lr 0.001");
  const auto diffs = braid::testing::weight_diffs(dir + "/ada.ckpt", dir + "/ada3.ckpt");
  EXPECT_EQ(diffs.size(), 6u);
  for (const auto& [name, worst] : diffs) EXPECT_EQ(worst, 0.0) << name;
}

}  // namespace
