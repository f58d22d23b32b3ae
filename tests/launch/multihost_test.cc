// braid across real (namespaced) hosts: two test hosts (support/test_hosts.h),
// each with its own network, host name, IPC and /dev/shm, joined by a
// bridge; one `braid run --nnodes 2 --node-rank R --master 198.18.0.1:PORT`
// launcher started inside each. Collectives (every op `braid bench` has,
// each size checked element by element) and data-parallel training (equal
// to the single-process run) must work with their traffic on that wire;
// a link cut in the middle of training ends both hosts within a bounded
// time, each naming what it lost.
// Skipped, with the reason, only where the machine forbids namespaces.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iterator>
#include <thread>
#include <string>
#include <vector>

#include "support/host_launch.h"
#include "support/multiproc.h"
#include "support/test_hosts.h"
#include "support/tool.h"
#include "support/weights.h"

namespace {

using braid::testing::braid_bin;
using braid::testing::HostJob;
using braid::testing::TestHosts;
using Clock = std::chrono::steady_clock;

using braid::testing::HostLaunch;
using braid::testing::launch_on_hosts;
using braid::testing::start_on_hosts;

const std::vector<std::string> kOps = {"all_reduce", "all_gather", "reduce_scatter", "broadcast",
                                       "reduce",     "all_to_all", "gather",         "scatter"};

// Every collective at 2 hosts × `per_host` ranks: both launchers exit 0,
// each rank ran on the host its node rank says, every op ran at the full
// world size and no element of any size was wrong.
void bench_across_hosts(int per_host) {
  BRAID_TEST_HOSTS(hosts, 2);
  const std::string dir = braid::testing::temp_dir("multihost_bench");
  const int world = 2 * per_host;
  const std::string program = "sh -c 'echo \"rank $BRAID_RANK on $(uname -n)\"; exec " + braid_bin() +
                              " bench --op all -b 8 -e 256K -f 8 --iters 2 --warmup 1'";
  const uint64_t rx0 = hosts->rx_bytes(1);
  HostLaunch l = launch_on_hosts(*hosts, per_host, program, dir, std::chrono::seconds(90));
  const std::string all = l.all();
  const uint64_t rx = hosts->rx_bytes(1) - rx0;
  std::printf("2 hosts x %d ranks: %.1f s, %llu bytes into node1\n", per_host, l.seconds,
              (unsigned long long)rx);
  ASSERT_EQ(l.status[0], 0) << all;
  ASSERT_EQ(l.status[1], 0) << all;
  for (int g = 0; g < world; ++g) {
    const int node = g / per_host;
    EXPECT_NE(l.out[size_t(node)].find("rank " + std::to_string(g) + " on node" + std::to_string(node)),
              std::string::npos)
        << "rank " << g << "\n" << all;
  }
  for (const auto& op : kOps)
    EXPECT_NE(l.out[0].find("# braid bench  op " + op + "  ranks " + std::to_string(world)),
              std::string::npos)
        << op << "\n" << all;
  // Rank 0's next rank is on the other host at 1 rank per host.
  if (per_host == 1) {
    EXPECT_NE(l.out[0].find("transport tcp"), std::string::npos) << all;
  }
  EXPECT_NE(l.out[0].find("# OK: 0 wrong elements in total"), std::string::npos) << all;
  EXPECT_EQ(l.out[0].find("FAILED"), std::string::npos) << all;
  // The data crossed the wire: the eight ops, each run three times at
  // 256 KiB, bring node1 well over 2 MiB (the store's traffic: a few KiB).
  EXPECT_GT(rx, uint64_t(kOps.size()) * 256 * 1024) << all;
}

TEST(MultiHost, EveryCollectiveTwoHostsOneRankEach) { bench_across_hosts(1); }

TEST(MultiHost, EveryCollectiveTwoHostsTwoRanksEach) { bench_across_hosts(2); }

// Data parallel with one rank on each host equals the single-process run:
// every step's loss, the final loss and the final weights.
TEST(MultiHost, DataParallelTrainingEqualsOneProcess) {
  BRAID_TEST_HOSTS(hosts, 2);
  const std::string dir = braid::testing::temp_dir("multihost_train");
  const std::string train =
      braid_bin() + " train mlp --steps 12 --batch 60 --threads 1 --quiet";
  std::string one_out;
  ASSERT_EQ(hosts->run(0, train + " --json-log " + dir + "/one.jsonl --checkpoint " + dir + "/one.ckpt",
                       &one_out),
            0)
      << one_out;
  const std::string program = "sh -c 'echo \"rank $BRAID_RANK on $(uname -n)\"; exec " + train +
                              " --json-log " + dir + "/dp.jsonl --checkpoint " + dir + "/dp.ckpt'";
  HostLaunch l = launch_on_hosts(*hosts, 1, program, dir, std::chrono::seconds(90));
  const std::string all = l.all();
  std::printf("2 hosts x 1 rank, train mlp: %.1f s\n", l.seconds);
  ASSERT_EQ(l.status[0], 0) << all;
  ASSERT_EQ(l.status[1], 0) << all;
  EXPECT_NE(l.out[0].find("rank 0 on node0"), std::string::npos) << all;
  EXPECT_NE(l.out[1].find("rank 1 on node1"), std::string::npos) << all;
  auto a = braid::testing::read_json_lines(dir + "/one.jsonl");
  auto b = braid::testing::read_json_lines(dir + "/dp.jsonl");
  ASSERT_EQ(a.size(), 13u);
  ASSERT_EQ(b.size(), 13u) << all;
  EXPECT_EQ(b.back()["dp"], 2) << all;
  braid::testing::expect_same_losses(a, b, "2 hosts x 1 rank");
  const auto diffs = braid::testing::weight_diffs(dir + "/one.ckpt", dir + "/dp.ckpt");
  EXPECT_FALSE(diffs.empty());
  for (const auto& [name, d] : diffs) {
    std::printf("%s: max |serial - 2 hosts| %.3g\n", name.c_str(), d);
    EXPECT_LE(d, 1e-5) << name;
  }
}

// A single-process run on host 0 and the same run launched over the hosts
// (`per_host` ranks each, with `flags`): both succeed, every step's loss
// and the final weights agree. Returns the launched run's output.
std::string expect_equal_across_hosts(const TestHosts& hosts, int per_host, const std::string& train,
                                      const std::string& flags, const std::string& tag,
                                      const std::string& env = "") {
  const std::string dir = braid::testing::temp_dir("multihost_" + tag);
  std::string one_out;
  EXPECT_EQ(hosts.run(0, train + " --json-log " + dir + "/one.jsonl --checkpoint " + dir + "/one.ckpt",
                      &one_out),
            0)
      << one_out;
  const std::string program = "sh -c 'echo \"rank $BRAID_RANK on $(uname -n)\"; exec " + train + " " +
                              flags + " --json-log " + dir + "/mp.jsonl --checkpoint " + dir +
                              "/mp.ckpt'";
  HostLaunch l = launch_on_hosts(hosts, per_host, program, dir, std::chrono::seconds(120), env);
  const std::string all = l.all();
  std::printf("%d hosts x %d ranks, %s: %.1f s\n", hosts.size(), per_host, flags.c_str(), l.seconds);
  for (int i = 0; i < hosts.size(); ++i) EXPECT_EQ(l.status[size_t(i)], 0) << all;
  for (int g = 0; g < hosts.size() * per_host; ++g) {
    const int node = g / per_host;
    EXPECT_NE(l.out[size_t(node)].find("rank " + std::to_string(g) + " on node" + std::to_string(node)),
              std::string::npos)
        << "rank " << g << "\n" << all;
  }
  auto a = braid::testing::read_json_lines(dir + "/one.jsonl");
  auto b = braid::testing::read_json_lines(dir + "/mp.jsonl");
  EXPECT_FALSE(a.empty()) << one_out;
  EXPECT_EQ(a.size(), b.size()) << all;
  braid::testing::expect_same_losses(a, b, tag);
  const auto diffs = braid::testing::weight_diffs(dir + "/one.ckpt", dir + "/mp.ckpt");
  EXPECT_FALSE(diffs.empty());
  for (const auto& [name, d] : diffs) EXPECT_LE(d, 5e-5) << tag << " " << name;
  return all;
}

// Tensor parallel inside a host, pipeline and data parallel across hosts
// (the mesh puts a tp group's ranks next to each other, so on one host):
// the GPT at (dp, tp, pp) = (1, 2, 2) and (2, 2, 1), the MLP at (1, 2, 2),
// each equal to its single-process run.
TEST(MultiHost, TensorInsideAHostPipelineAndDataAcrossHosts) {
  BRAID_TEST_HOSTS(hosts, 2);
  const std::string gpt = braid_bin() +
                          " train gpt --steps 4 --batch 8 --layers 2 --d-model 32 --heads 4 "
                          "--context 16 --threads 1";
  std::string out = expect_equal_across_hosts(*hosts, 2, gpt, "--tp 2 --pp 2 --micro-batches 2",
                                              "gpt_tp2_pp2");
  // Rank 0 prints the mesh: each tp group is one host's two ranks, each
  // pipeline crosses the hosts.
  EXPECT_NE(out.find("tp groups: [0 1] [2 3]"), std::string::npos) << out;
  EXPECT_NE(out.find("pp groups: [0 2] [1 3]"), std::string::npos) << out;
  expect_equal_across_hosts(*hosts, 2, gpt, "--dp 2 --tp 2", "gpt_dp2_tp2");
  expect_equal_across_hosts(*hosts, 2,
                            braid_bin() + " train mlp --steps 6 --batch 60 --threads 1 --quiet",
                            "--tp 2 --pp 2 --micro-batches 2", "mlp_tp2_pp2");
}

// Data parallel at 2 hosts x 2 ranks with its all_reduces forced onto the
// hierarchy (a tree in each host over shared memory, the hosts' leaders
// over the wire; a forced algorithm that cannot run fails the call): equal
// to one process.
TEST(MultiHost, DataParallelReducingHierarchicallyEqualsOneProcess) {
  BRAID_TEST_HOSTS(hosts, 2);
  expect_equal_across_hosts(*hosts, 2,
                            braid_bin() + " train mlp --steps 6 --batch 60 --threads 1 --quiet", "",
                            "mlp_dp4_hier", "BRAID_ALGO=all_reduce:hier");
}

// Three hosts, one rank each: data parallel training equals one process.
TEST(MultiHost, ThreeHostsDataParallelEqualsOneProcess) {
  BRAID_TEST_HOSTS(hosts, 3);
  expect_equal_across_hosts(*hosts, 1,
                            braid_bin() + " train mlp --steps 6 --batch 60 --threads 1 --quiet", "",
                            "mlp_dp3");
}

// The parameter server across hosts, 2 hosts x 2 ranks, BSP equal to
// data-parallel training over the same workers on one host, step by step
// and in the final weights; worker 0's links (the done record counts its
// own) on shared memory only where it shares a host with the server:
//   * dedicated: workers 0-2 and the server (rank 3, on node1): worker 0
//     reaches it over the wire;
//   * colocated: 4 workers, worker 0 (node0) also the server: its own link
//     on shared memory, workers 2 and 3 over the wire.
TEST(MultiHost, ParameterServerAcrossHostsEqualsDataParallel) {
  BRAID_TEST_HOSTS(hosts, 2);
  const std::string dir = braid::testing::temp_dir("multihost_ps");
  const std::string mlp = " mlp --steps 8 --batch 60 --threads 1 --quiet";
  struct Case {
    std::string flags;
    int workers, shm_links;
  };
  for (const Case& c : {Case{"--servers 1 --workers 3", 3, 0},
                        Case{"--servers 1 --workers 4 --placement colocated", 4, 1}}) {
    const std::string w = std::to_string(c.workers);
    std::string dp_out;
    ASSERT_EQ(hosts->run(0, braid_bin() + " train" + mlp + " --dp " + w + " --json-log " + dir +
                                "/dp" + w + ".jsonl --checkpoint " + dir + "/dp" + w + ".ckpt",
                         &dp_out),
              0)
        << dp_out;
    const std::string program = "sh -c 'echo \"rank $BRAID_RANK on $(uname -n)\"; exec " +
                                braid_bin() + " ps train" + mlp + " " + c.flags + " --json-log " +
                                dir + "/ps.jsonl --checkpoint " + dir + "/ps.ckpt'";
    HostLaunch l = launch_on_hosts(*hosts, 2, program, dir, std::chrono::seconds(120));
    const std::string all = l.all();
    std::printf("2 hosts x 2 ranks, ps train %s: %.1f s\n", c.flags.c_str(), l.seconds);
    ASSERT_EQ(l.status[0], 0) << c.flags << "\n" << all;
    ASSERT_EQ(l.status[1], 0) << c.flags << "\n" << all;
    EXPECT_NE(l.out[1].find("rank 3 on node1"), std::string::npos) << all;
    auto a = braid::testing::read_json_lines(dir + "/dp" + w + ".jsonl");
    auto b = braid::testing::read_json_lines(dir + "/ps.jsonl");
    ASSERT_FALSE(a.empty()) << dp_out;
    ASSERT_EQ(a.size(), b.size()) << all;
    braid::testing::expect_same_losses(a, b, "ps across hosts " + c.flags);
    const auto diffs = braid::testing::weight_diffs(dir + "/dp" + w + ".ckpt", dir + "/ps.ckpt");
    EXPECT_FALSE(diffs.empty());
    for (const auto& [name, d] : diffs) EXPECT_LE(d, 1e-5) << c.flags << " " << name;
    EXPECT_EQ(b.back()["shm_links"], c.shm_links) << c.flags << "\n" << b.back().dump();
  }
}

// Open MPI's mpirun across the hosts, as a user runs it on a cluster: on
// node0, with a launch agent that starts its daemon on node1 (in place of
// ssh: it enters node1's namespaces), TCP between the hosts only
// (--mca btl tcp,self,vader on eth0), the job's store at MASTER_ADDR. Data
// parallel training at 2 hosts x 2 ranks equals `braid train --dp 4` on one
// host.
TEST(MultiHost, MpirunAcrossHostsEqualsOneHost) {
  BRAID_TEST_HOSTS(hosts, 2);
  const std::string dir = braid::testing::temp_dir("multihost_mpirun");
  hosts->name_hosts(dir);
  const std::string agent = hosts->write_launch_agent(dir);
  const std::string mlp = braid_bin() + " train mlp --steps 8 --batch 60 --threads 1 --quiet";
  std::string out;
  ASSERT_EQ(hosts->run(0, mlp + " --dp 4 --json-log " + dir + "/one.jsonl --checkpoint " + dir +
                              "/one.ck",
                       &out),
            0)
      << out;
  const std::string mpirun =
      "timeout 120 mpirun --allow-run-as-root --oversubscribe -H node0:2,node1:2 -np 4 "
      "--mca plm_rsh_agent " + agent + " --mca btl tcp,self,vader --mca btl_tcp_if_include "
      "eth0 --mca oob_tcp_if_include eth0 -x MASTER_ADDR=node0"
      " -x MASTER_PORT=29600 -x BRAID_SECRET=mpirun-hosts -x PATH ";
  const auto t0 = Clock::now();
  const int status = hosts->run(
      0, mpirun + "sh -c 'echo \"rank $OMPI_COMM_WORLD_RANK on $(uname -n)\"; exec " + mlp +
             " --json-log " + dir + "/mpi.jsonl --checkpoint " + dir + "/mpi.ck'",
      &out);
  std::printf("mpirun, 2 hosts x 2 ranks, train mlp: %.1f s\n",
              std::chrono::duration<double>(Clock::now() - t0).count());
  ASSERT_EQ(status, 0) << out;
  for (const char* line : {"rank 0 on node0", "rank 1 on node0", "rank 2 on node1", "rank 3 on node1"})
    EXPECT_NE(out.find(line), std::string::npos) << line << "\n" << out;
  const auto a = braid::testing::read_json_lines(dir + "/one.jsonl");
  const auto b = braid::testing::read_json_lines(dir + "/mpi.jsonl");
  ASSERT_FALSE(a.empty());
  braid::testing::expect_same_losses(a, b, "mpirun across hosts");
  const auto diffs = braid::testing::weight_diffs(dir + "/one.ck", dir + "/mpi.ck");
  EXPECT_FALSE(diffs.empty());
  for (const auto& [name, d] : diffs) EXPECT_LE(d, 1e-5) << name;
}

// node1's link to the bridge cut in the middle of training (BRAID_TIMEOUT
// 10): every rank and both launchers end within a bounded time, and each
// side names what it lost.
TEST(MultiHost, LinkCutMidTrainingEndsBothHostsNamingThePeer) {
  BRAID_TEST_HOSTS(hosts, 2);
  const std::string dir = braid::testing::temp_dir("multihost_cut");
  const std::string program =
      braid_bin() + " train mlp --steps 100000 --batch 60 --threads 1 --quiet --json-log " + dir + "/dp.jsonl";
  std::vector<HostJob> jobs = start_on_hosts(*hosts, 1, program, dir, 10);
  // Training under way: some steps logged (at most 30 s).
  const size_t steps =
      braid::testing::wait_for_lines(dir + "/dp.jsonl", 20, std::chrono::seconds(30));
  ASSERT_GE(steps, 20u) << jobs[0].output() << jobs[1].output();
  hosts->set_link(1, false);
  const auto cut = Clock::now();
  // When each launcher ended (polled together, at most 60 s).
  std::vector<double> ended(jobs.size(), -1);
  for (int left = int(jobs.size()); left > 0 && Clock::now() - cut < std::chrono::seconds(60);) {
    for (size_t i = 0; i < jobs.size(); ++i)
      if (ended[i] < 0 && !jobs[i].running()) {
        ended[i] = std::chrono::duration<double>(Clock::now() - cut).count();
        --left;
      }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::vector<int> status;
  for (auto& j : jobs) status.push_back(j.wait(Clock::now()));  // kills one still running
  const std::string all = "--- node 0 (status " + std::to_string(status[0]) + ", " +
                          std::to_string(ended[0]) + " s after the cut)\n" + jobs[0].output() +
                          "--- node 1 (status " + std::to_string(status[1]) + ", " +
                          std::to_string(ended[1]) + " s after the cut)\n" + jobs[1].output();
  std::printf("after the cut: node 0 ended in %.1f s, node 1 in %.1f s (-1: not in 60 s)\n", ended[0],
              ended[1]);
  for (int i = 0; i < 2; ++i) {
    EXPECT_GT(status[size_t(i)], 0) << "node " << i << " (-1: still running at the deadline)\n" << all;
    EXPECT_GE(ended[size_t(i)], 0.0) << "node " << i << " still running 60 s after the cut\n" << all;
    EXPECT_LT(ended[size_t(i)], 40.0) << "node " << i << "\n" << all;
  }
  // Each side names the host it lost: node 0's launcher the node it no
  // longer hears; on node 1 its launcher (the store on node0 is lost) or its
  // rank (rank 0 on host node0 timed out), whichever ends first.
  EXPECT_NE(jobs[0].output().find("node 1 (node1 pid"), std::string::npos) << all;
  EXPECT_NE(jobs[0].output().find("has not been heard from"), std::string::npos) << all;
  EXPECT_NE(jobs[1].output().find("node0"), std::string::npos) << all;
}

}  // namespace
