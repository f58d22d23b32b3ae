// braid under a real Slurm cluster: Debian's slurmctld and one slurmd per
// test host (support/test_hosts.h: node0 and node1, each its own network,
// host name, IPC and /dev/shm), started and stopped by the test, with
// AuthType=auth/none (no munge key to share) and no cgroups. Each host's
// /etc/hosts (its own mount namespace) names the nodes, as a cluster's DNS
// would. Then, as a user runs them:
//   * `srun -N2 -n4` puts two tasks on each node;
//   * `srun -N2 -n4 braid train mlp` (data parallel, ranks from SLURM_*, the
//     store on the first node of the step) equals `braid train mlp --dp 4`
//     on one host, step by step and in its final weights;
//   * `srun -N2 -n4 braid train gpt --tp 2 --pp 2` equals the one-process
//     run;
//   * the README's sbatch script, `sbatch --wait`, runs the same srun line.
// Skipped, naming why, where test hosts cannot be made or Slurm is not
// installed (scripts/deps.sh installs it); under BRAID_TEST_HOSTS_REQUIRED=1
// a missing Slurm fails instead.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "support/multiproc.h"
#include "support/test_hosts.h"
#include "support/tool.h"
#include "support/weights.h"

namespace {

using braid::testing::braid_bin;
using braid::testing::HostJob;
using braid::testing::TestHosts;
using Clock = std::chrono::steady_clock;

bool have(const char* program) {
  return braid::testing::run_command(std::string("command -v ") + program).status == 0;
}

// A two-node Slurm cluster on the test hosts, for the life of the object.
class SlurmCluster {
 public:
  explicit SlurmCluster(TestHosts& hosts) : hosts_(hosts), dir_(braid::testing::temp_dir("slurm")) {
    hosts.name_hosts(dir_);
    std::ofstream c(conf());
    c << "ClusterName=braidtest\n"
      << "SlurmctldHost=node0(" << hosts.address(0) << ")\n"
      << "AuthType=auth/none\nCredType=cred/none\n"
      << "SlurmUser=root\nSlurmdUser=root\n"
      << "StateSaveLocation=" << dir_ << "/ctld\n"
      << "SlurmdSpoolDir=" << dir_ << "/spool-%n\n"
      << "SlurmctldPidFile=" << dir_ << "/ctld.pid\n"
      << "SlurmdPidFile=" << dir_ << "/slurmd-%n.pid\n"
      << "SlurmctldLogFile=" << dir_ << "/ctld.log\n"
      << "SlurmdLogFile=" << dir_ << "/slurmd-%n.log\n"
      << "ProctrackType=proctrack/pgid\nTaskPlugin=task/none\nMpiDefault=none\n"
      << "JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n"
      << "SchedulerType=sched/builtin\nSelectType=select/linear\n"
      << "ReturnToService=2\nSlurmdTimeout=30\nSlurmctldTimeout=30\nMessageTimeout=20\n";
    for (int i = 0; i < hosts.size(); ++i)
      c << "NodeName=" << hosts.name(i) << " NodeAddr=" << hosts.address(i)
        << " CPUs=2 State=UNKNOWN\n";
    c << "PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE\n";
    c.close();
    ::mkdir((dir_ + "/ctld").c_str(), 0755);
    daemons_.push_back(hosts.start(0, "exec slurmctld -D -i -f " + conf(), dir_ + "/ctld.out"));
    for (int i = 0; i < hosts.size(); ++i)
      daemons_.push_back(hosts.start(
          i, "exec slurmd -D -f " + conf() + " -N " + hosts.name(i), dir_ + "/slurmd" +
                                                                          std::to_string(i) + ".out"));
  }

  const std::string& dir() const { return dir_; }
  std::string conf() const { return dir_ + "/slurm.conf"; }
  // Runs `cmd` on node0 with this cluster's configuration.
  int run(const std::string& cmd, std::string* out) const {
    return hosts_.run(0, "export SLURM_CONF=" + conf() + "; " + cmd, out);
  }
  // Until every node is idle (at most `limit`); false with what sinfo said.
  bool ready(std::chrono::seconds limit, std::string* last) const {
    const auto t0 = Clock::now();
    while (Clock::now() - t0 < limit) {
      if (run("sinfo -h -N -o '%N %T'", last) == 0 && last->find("idle") != std::string::npos &&
          last->find("node1 idle") != std::string::npos &&
          last->find("node0 idle") != std::string::npos)
        return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
    return false;
  }
  std::string logs() const {
    std::string s;
    for (const char* f : {"/ctld.log", "/slurmd-node0.log", "/slurmd-node1.log", "/ctld.out",
                          "/slurmd0.out", "/slurmd1.out"}) {
      std::ifstream in(dir_ + f);
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (text.size() > 3000) text = text.substr(text.size() - 3000);
      s += std::string("--- ") + f + "\n" + text;
    }
    return s;
  }
  ~SlurmCluster() {
    for (auto& d : daemons_) d.wait(Clock::now());  // kills what still runs
  }

 private:
  TestHosts& hosts_;
  std::string dir_;
  std::vector<HostJob> daemons_;
};

#define BRAID_SLURM(cluster, hosts)                                                           \
  if (!have("slurmctld") || !have("slurmd") || !have("srun")) {                               \
    const char* why = "Slurm is not installed (scripts/deps.sh installs slurmctld, slurmd, srun)"; \
    if (::braid::testing::test_hosts_required()) FAIL() << why;                              \
    GTEST_SKIP() << why;                                                                      \
  }                                                                                           \
  SlurmCluster cluster(*hosts);                                                               \
  {                                                                                           \
    std::string sinfo;                                                                        \
    ASSERT_TRUE(cluster.ready(std::chrono::seconds(60), &sinfo)) << sinfo << cluster.logs();  \
  }

// `cmd` (a training command writing --json-log and --checkpoint under
// `tag`) run in one process on node0 and under `srun_flags` on the cluster:
// both succeed and agree step by step and in the final weights.
void expect_srun_equals(const SlurmCluster& cluster, const std::string& one, const std::string& many,
                        const std::string& tag) {
  const std::string d = cluster.dir();
  std::string out;
  ASSERT_EQ(cluster.run(one + " --json-log " + d + "/" + tag + "-one.jsonl --checkpoint " + d +
                            "/" + tag + "-one.ck",
                        &out),
            0)
      << out;
  const auto t0 = Clock::now();
  ASSERT_EQ(cluster.run("timeout 120 " + many + " --json-log " + d + "/" + tag +
                            "-srun.jsonl --checkpoint " + d + "/" + tag + "-srun.ck",
                        &out),
            0)
      << out << cluster.logs();
  std::printf("%s: %.1f s\n", many.c_str(), std::chrono::duration<double>(Clock::now() - t0).count());
  const auto a = braid::testing::read_json_lines(d + "/" + tag + "-one.jsonl");
  const auto b = braid::testing::read_json_lines(d + "/" + tag + "-srun.jsonl");
  ASSERT_FALSE(a.empty());
  braid::testing::expect_same_losses(a, b, tag);
  const auto diffs = braid::testing::weight_diffs(d + "/" + tag + "-one.ck", d + "/" + tag + "-srun.ck");
  EXPECT_FALSE(diffs.empty());
  for (const auto& [name, diff] : diffs) EXPECT_LE(diff, 5e-5) << tag << " " << name;
}

TEST(Slurm, SrunTrainsAcrossTwoNodesAsOneHostDoes) {
  BRAID_TEST_HOSTS(hosts, 2);
  BRAID_SLURM(cluster, hosts);
  // The step's tasks: two on each node, ranks in node order.
  std::string out;
  ASSERT_EQ(cluster.run("srun -N2 -n4 -l sh -c 'echo on $(uname -n)' | sort", &out), 0) << out;
  for (const char* line : {"0: on node0", "1: on node0", "2: on node1", "3: on node1"})
    EXPECT_NE(out.find(line), std::string::npos) << line << "\n" << out;
  const std::string mlp = braid_bin() + " train mlp --steps 8 --batch 60 --threads 1 --quiet";
  expect_srun_equals(cluster, mlp + " --dp 4", "srun -N2 -n4 --kill-on-bad-exit=1 " + mlp, "mlp");
  const std::string gpt = braid_bin() +
                          " train gpt --steps 4 --batch 8 --layers 2 --d-model 32 --heads 4 "
                          "--context 16 --threads 1 --quiet";
  expect_srun_equals(cluster, gpt, "srun -N2 -n4 --kill-on-bad-exit=1 " + gpt + " --tp 2 --pp 2",
                     "gpt");
}

TEST(Slurm, TheReadmesSbatchScriptRuns) {
  BRAID_TEST_HOSTS(hosts, 2);
  BRAID_SLURM(cluster, hosts);
  const std::string d = cluster.dir();
  std::ofstream script(d + "/train.sbatch");
  script << "#!/bin/sh\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=2\n"
         << "srun --kill-on-bad-exit=1 " << braid_bin()
         << " train mlp --steps 8 --batch 60 --threads 1 --quiet --json-log " << d
         << "/sbatch.jsonl\n";
  script.close();
  std::string out;
  ASSERT_EQ(cluster.run("cd " + d + " && timeout 120 sbatch --wait -o " + d + "/sbatch.out " + d +
                            "/train.sbatch",
                        &out),
            0)
      << out << cluster.logs();
  const auto log = braid::testing::read_json_lines(d + "/sbatch.jsonl");
  ASSERT_FALSE(log.empty()) << out;
  EXPECT_EQ(log.back()["event"], "done");
  EXPECT_EQ(log.back()["dp"], 4);
}

// The parameter server's fail-over under srun: with --kill-on-bad-exit=0
// Slurm leaves the other tasks running when one dies, so a server killed
// mid-training (--kill-server 1:7; 2 workers, 3 dedicated servers, chains
// of 2, 5 tasks over the two 2-CPU nodes: --overcommit) is replaced by its chain and the job
// completes, its weights bit for bit those of the same job with no
// failure (srun still exits with the killed task's status). With
// --kill-on-bad-exit=1 the same death ends the whole step.
TEST(Slurm, ParameterServerFailsOverUnderSrunThatLetsATaskDie) {
  BRAID_TEST_HOSTS(hosts, 2);
  BRAID_SLURM(cluster, hosts);
  const std::string d = cluster.dir();
  const std::string ps = braid_bin() +
                         " ps train mlp --steps 12 --batch 60 --threads 1 --quiet --workers 2 "
                         "--servers 3 --replicas 2 --consistency bsp --ps-timeout 60";
  auto files = [&](const std::string& tag) {
    return " --json-log " + d + "/" + tag + ".jsonl --checkpoint " + d + "/" + tag + ".ck";
  };
  std::string out;
  ASSERT_EQ(cluster.run("timeout 120 " + ps + files("ref"), &out), 0) << out;
  // srun's own status is the worst task's: the killed server's, 128 + 9.
  ASSERT_EQ(cluster.run("export BRAID_SECRET=slurm-ps-test; timeout 120 srun -N2 -n5 --overcommit "
                        "--kill-on-bad-exit=0 " + ps + " --kill-server 1:7" + files("k0"),
                        &out),
            137)
      << out << cluster.logs();
  EXPECT_NE(out.find("task 3: Killed"), std::string::npos) << out;  // server 1: ranks 0, 1 work
  EXPECT_NE(out.find("done: mlp 12 steps"), std::string::npos) << out;
  const auto log = braid::testing::read_json_lines(d + "/k0.jsonl");
  ASSERT_FALSE(log.empty()) << out;
  const nlohmann::json& done = log.back();
  EXPECT_EQ(done["event"], "done") << out;
  EXPECT_EQ(done["steps_taken"], 12) << out;
  EXPECT_EQ(done["dead_servers"], nlohmann::json::array({1})) << out;
  ASSERT_EQ(done["failovers"].size(), 1u) << out;
  EXPECT_EQ(done["failovers"][0]["server"], 1) << out;
  const auto diffs = braid::testing::weight_diffs(d + "/ref.ck", d + "/k0.ck");
  EXPECT_FALSE(diffs.empty());
  for (const auto& [name, diff] : diffs) EXPECT_EQ(diff, 0) << name;
  // Slurm ending the step at the death: the job fails, naming no success.
  // Long enough after the death (300 steps, about 2 s) that Slurm's kill
  // lands first: 12 steps once finished before it did (0.1 s), under load.
  std::string longer = ps;
  longer.replace(longer.find("--steps 12"), 10, "--steps 300");
  const int st = cluster.run("export BRAID_SECRET=slurm-ps-test; timeout 120 srun -N2 -n5 "
                             "--overcommit --kill-on-bad-exit=1 " + longer + " --kill-server 1:7" +
                                 files("k1"),
                             &out);
  EXPECT_NE(st, 0) << out;
  EXPECT_NE(st, 124) << "the step hung: " << out;
  EXPECT_EQ(out.find("done: mlp"), std::string::npos) << out;
}

}  // namespace
