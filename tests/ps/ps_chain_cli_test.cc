// Fail-over through `braid ps train --replicas 2` with real processes: 2
// workers and 3 dedicated servers (shard s on the chain s, s+1 mod 3) train
// the MLP under BSP, and --kill-server SIGKILLs a server mid-training. The
// supervisor lets the job go on (server 0 is the head of shard 0's chain,
// server 1 its tail; one case runs self-forked, one under braid run).
// Training completes; for every shard the pushes and clocks the workers had
// acknowledged equal what the surviving tail accepted and closed; and the
// final weights are bit for bit those of the same job without a failure and
// of R = 1; with --save-dir, every later step still holds every shard. A
// worker's death is not survivable, nor is a chain's last
// member's, nor any server's with R = 1: those jobs fail, naming who.
//
// Under Open MPI's mpirun (scripts/deps.sh installs it), mpirun, not
// braid, decides whether a death ends the job: by default it aborts every
// rank, so rank 0 warns at start, naming the option; under `mpirun
// --enable-recovery` a killed server's job completes as above. A worker
// that fails there posts its failure, and the servers, which mpirun no
// longer stops, end on it instead of waiting for its goodbye.
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "braid/checkpoint.h"
#include "cli_test_util.h"
#include "support/multiproc.h"
#include "support/tool.h"

namespace {

using braid::testing::braid_bin;
using braid::testing::CommandResult;
using braid::testing::run_command;

constexpr int kSteps = 12, kWorkers = 2;
const std::string kJob = " ps train mlp --steps 12 --batch 60 --threads 1 --quiet --workers 2 "
                         "--consistency bsp --ps-timeout 60";

using Job = braid::testing::ps_cli::Job;

// `prefix` runs the tool (braid, or braid run -n N -- braid).
Job run(const std::string& dir, const std::string& name, const std::string& prefix,
        const std::string& args) {
  return braid::testing::ps_cli::run_job(dir, name, prefix + kJob + args);
}

// Every model tensor of `a` equals `b`'s bit for bit.
void expect_identical_weights(const std::string& a, const std::string& b, const std::string& what) {
  const braid::Checkpoint ca = braid::load_checkpoint(a), cb = braid::load_checkpoint(b);
  size_t compared = 0;
  for (const auto& [name, ta] : ca.tensors) {
    if (name.rfind("model/", 0) != 0) continue;
    const auto it = cb.tensors.find(name);
    ASSERT_NE(it, cb.tensors.end()) << what << ": " << name;
    ASSERT_EQ(it->second.numel(), ta.numel()) << what << ": " << name;
    int64_t differ = 0;
    for (int64_t i = 0; i < ta.numel(); ++i) differ += ta.f32()[i] != it->second.f32()[i];
    EXPECT_EQ(differ, 0) << what << ": " << name;
    ++compared;
  }
  EXPECT_EQ(compared, 6u) << what;
}

// The done record of a job whose server `victim` was killed at `step`.
void expect_chains_lost_nothing(const Job& k, int victim, int step) {
  ASSERT_EQ(k.r.status, 0) << k.r.out;
  ASSERT_EQ(k.log.size(), size_t(kSteps + 1));
  const nlohmann::json& done = k.log.back();
  EXPECT_EQ(done["steps_taken"], kSteps);
  EXPECT_EQ(done["dead_servers"], nlohmann::json::array({victim}));
  EXPECT_EQ(done["epoch"], 1);
  EXPECT_GE(done["reroutes"].get<int64_t>(), 1);
  ASSERT_EQ(done["failovers"].size(), 1u);
  const nlohmann::json& fo = done["failovers"][0];
  EXPECT_EQ(fo["server"], victim);
  EXPECT_EQ(fo["step"], step);
  // Measured (a push was acknowledged after the death); its size is the
  // benchmark's business, not a test's.
  EXPECT_GE(fo["failover_s"].get<double>(), 0.0);
  EXPECT_GE(fo["failover_s"].get<double>(), fo["push_s"].get<double>());
  EXPECT_EQ(k.log[size_t(step)]["killed_server"], victim);
  ASSERT_EQ(done["chains"].size(), 3u);
  int64_t acked = 0;
  for (const auto& c : done["chains"]) {
    SCOPED_TRACE("shard " + c["shard"].dump());
    EXPECT_EQ(c["pushes_acked"], c["tail_pushes_accepted"]);
    EXPECT_EQ(c["clocks_acked"], kWorkers * kSteps);
    EXPECT_EQ(c["tail_rounds_closed"], kSteps);
    EXPECT_EQ(c["tail_updates_applied"], kSteps);
    acked += c["pushes_acked"].get<int64_t>();
  }
  EXPECT_EQ(done["pushes_accepted"], acked);
}

// ... and braid's supervisor (braid run, self-forked) named the death.
void expect_failed_over(const Job& k, int victim, int step) {
  ASSERT_EQ(k.r.status, 0) << k.r.out;
  EXPECT_NE(k.r.out.find("was killed by signal 9 (SIGKILL); the job goes on (parameter server " +
                         std::to_string(victim)),
            std::string::npos)
      << k.r.out;
  expect_chains_lost_nothing(k, victim, step);
}

TEST(PsChainCli, KillHeadAndTailMidTrainingTheJobCompletesAndLosesNothing) {
  const std::string dir = braid::testing::temp_dir("ps_chain_cli");
  const std::string self = braid_bin(), launched = braid_bin() + " run -n 5 -- " + braid_bin();
  const Job r1 = run(dir, "r1", self, " --servers 3");
  const Job r2 = run(dir, "r2", self, " --servers 3 --replicas 2");
  ASSERT_EQ(r1.r.status, 0) << r1.r.out;
  ASSERT_EQ(r2.r.status, 0) << r2.r.out;
  expect_identical_weights(r1.ckpt, r2.ckpt, "R=2 vs R=1");
  EXPECT_EQ(r2.log.back()["dead_servers"], nlohmann::json::array());
  EXPECT_EQ(r2.log.back()["failovers"], nlohmann::json::array());

  const Job head = run(dir, "head", self, " --servers 3 --replicas 2 --kill-server 0:5");
  expect_failed_over(head, 0, 5);
  expect_identical_weights(r2.ckpt, head.ckpt, "head killed vs no failure");

  const Job tail = run(dir, "tail", launched, " --servers 3 --replicas 2 --kill-server 1:7");
  expect_failed_over(tail, 1, 7);
  expect_identical_weights(r2.ckpt, tail.ckpt, "tail killed (braid run) vs no failure");
}

TEST(PsChainCli, AKilledServersShardsKeepBeingSavedByTheirChains) {
  // Server 0 (home and head of shard 0) dies at step 5 of a job saving every
  // 4 steps: the later steps still hold every shard (saved by each chain's
  // live head), and resuming from step 8 trains as the job that never failed.
  const std::string dir = braid::testing::temp_dir("ps_chain_cli_save");
  const Job r2 = run(dir, "r2", braid_bin(), " --servers 3 --replicas 2");
  const Job killed = run(dir, "killed", braid_bin(),
                         " --servers 3 --replicas 2 --kill-server 0:5 --save-dir " + dir +
                             "/s --save-every 4");
  expect_failed_over(killed, 0, 5);
  for (const char* step : {"step-00000008", "step-00000012"})
    for (int s = 0; s < 3; ++s)
      EXPECT_TRUE(std::filesystem::exists(dir + "/s/" + step + "/shard-" + std::to_string(s) +
                                          ".ckpt"))
          << step << ", shard " << s;
  const Job resumed = run(dir, "resumed", braid_bin(),
                          " --servers 3 --replicas 2 --resume " + dir + "/s/step-00000008");
  ASSERT_EQ(resumed.r.status, 0) << resumed.r.out;
  EXPECT_EQ(resumed.log.back()["resumed_at"], 8);
  expect_identical_weights(r2.ckpt, resumed.ckpt, "resumed from a save after the death");
}

TEST(PsChainCli, LosingAChainsLastMemberOrAnUnreplicatedServerFailsTheJob) {
  const std::string dir = braid::testing::temp_dir("ps_chain_cli_fail");
  // Both members of every chain (2 servers, R = 2), one after the other.
  const Job both = run(dir, "both", braid_bin(),
                       " --servers 2 --replicas 2 --kill-server 0:3 --kill-server 1:6");
  EXPECT_NE(both.r.status, 0) << both.r.out;
  EXPECT_NE(both.r.out.find("the job goes on (parameter server 0"), std::string::npos) << both.r.out;
  EXPECT_NE(both.r.out.find("the job goes on (parameter server 1"), std::string::npos) << both.r.out;
  EXPECT_NE(both.r.out.find(": parameter-server worker "), std::string::npos) << both.r.out;
  EXPECT_NE(both.r.out.find("every server of its chain of 2 is dead"), std::string::npos)
      << both.r.out;
  EXPECT_NE(both.r.out.find(") exited with status 1; stopped the other"), std::string::npos)
      << both.r.out;

  // R = 1: the server's death ends the job at once, named by the supervisor.
  const Job one = run(dir, "one", braid_bin(), " --servers 2 --kill-server 1:3");
  EXPECT_EQ(one.r.status, 137) << one.r.out;
  EXPECT_NE(one.r.out.find("braid ps: rank 3 (pid "), std::string::npos) << one.r.out;
  EXPECT_NE(one.r.out.find("was killed by signal 9 (SIGKILL); stopped the other 3 ranks"),
            std::string::npos)
      << one.r.out;
  EXPECT_EQ(one.r.out.find("the job goes on"), std::string::npos) << one.r.out;
}

TEST(PsChainCli, KillServerFlagIsChecked) {
  for (const std::string bad : {"3:1", "x:1", "0:", "0:-1", "1", ":4", "0:99"}) {
    const CommandResult r = run_command(braid_bin() + kJob + " --servers 3 --replicas 2 --kill-server " +
                                        bad + " 2>&1");
    EXPECT_NE(r.status, 0) << bad;
    EXPECT_NE(r.out.find("--kill-server"), std::string::npos) << bad << ": " << r.out;
  }
  const CommandResult co = run_command(braid_bin() + kJob +
                                       " --servers 2 --placement colocated --kill-server 0:1 2>&1");
  EXPECT_NE(co.status, 0);
  EXPECT_NE(co.out.find("--kill-server needs --placement dedicated"), std::string::npos) << co.out;
}

using braid::testing::ps_cli::mpirun_missing;

// mpirun -n 5 with `options`, its ranks running `tool` (braid, or a
// wrapper around it). Open MPI refuses root unless told; the secret is the
// job's own so that no rank warns about a derived one. `timeout` turns a
// hung job into status 124 instead of a hung test.
std::string mpirun(const std::string& options, const std::string& tool) {
  const std::string root =
      ::geteuid() == 0 ? "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 " : "";
  return root + "BRAID_SECRET=ps-mpirun-test timeout 300 mpirun -x BRAID_SECRET -n 5 "
                "--oversubscribe " + options + " " + tool;
}

const std::string kRecoveryWarning =
    "braid ps: --replicas 2 lets a server die, but this launcher ends the whole job when any "
    "rank dies; start it with mpirun --enable-recovery";

TEST(PsChainCli, UnderMpirunWithRecoveryAServerDiesAndTrainingCompletesLosingNothing) {
  ASSERT_EQ(mpirun_missing(), "") << "scripts/deps.sh installs openmpi-bin";
  const std::string dir = braid::testing::temp_dir("ps_chain_mpirun");
  const std::string args = " --servers 3 --replicas 2";
  const Job ref = run(dir, "ref", braid_bin(), args);
  ASSERT_EQ(ref.r.status, 0) << ref.r.out;

  // Without the option: the warning, and (no death) the same training ...
  const Job plain = run(dir, "plain", mpirun("", braid_bin()), args);
  ASSERT_EQ(plain.r.status, 0) << plain.r.out;
  EXPECT_NE(plain.r.out.find(kRecoveryWarning), std::string::npos) << plain.r.out;
  expect_identical_weights(ref.ckpt, plain.ckpt, "mpirun vs self-forked");
  // ... and a server's death ends the whole job, as the warning said:
  // mpirun names the rank that died, server 1's (ranks 0 and 1 are the
  // workers, 2.. the servers), and its signal, SIGKILL's 9; its own status
  // is the death's, 128 + 9.
  const Job aborted = run(dir, "aborted", mpirun("", braid_bin()), args + " --kill-server 1:7");
  EXPECT_EQ(aborted.r.status, 137) << aborted.r.out;
  EXPECT_EQ(aborted.r.out.find("done: mlp"), std::string::npos) << aborted.r.out;
  const size_t noticed = aborted.r.out.find("mpirun noticed that process rank ");
  ASSERT_NE(noticed, std::string::npos) << aborted.r.out;
  const std::string line =
      aborted.r.out.substr(noticed, aborted.r.out.find('\n', noticed) - noticed);
  EXPECT_NE(line.find("process rank " + std::to_string(kWorkers + 1) + " with PID "),
            std::string::npos)
      << line;
  EXPECT_NE(line.find(" exited on signal 9 (Killed)"), std::string::npos) << line;

  // With it: no warning, and the job goes on past the tail of shard 0's
  // chain (server 1).
  const Job k = run(dir, "killed", mpirun("--enable-recovery", braid_bin()),
                    args + " --kill-server 1:7");
  EXPECT_EQ(k.r.out.find(kRecoveryWarning), std::string::npos) << k.r.out;
  expect_chains_lost_nothing(k, 1, 7);
  expect_identical_weights(ref.ckpt, k.ckpt, "server killed under mpirun vs no failure");
}

TEST(PsChainCli, UnderMpirunWithRecoveryAFailedWorkerEndsTheServers) {
  ASSERT_EQ(mpirun_missing(), "") << "scripts/deps.sh installs openmpi-bin";
  // Rank 1 (a worker) fails before it starts; worker 0 gives up on it
  // after --ps-timeout and posts its failure; the servers, which mpirun
  // --enable-recovery leaves running, end on that post.
  const std::string tool = "sh -c 'if [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then exit 3; fi; "
                           "exec \"$0\" \"$@\"' " + braid_bin();
  const CommandResult r = run_command(mpirun("--enable-recovery", tool) +
                                      " ps train mlp --steps 12 --batch 60 --threads 1 --quiet "
                                      "--workers 2 --servers 3 --replicas 2 --consistency bsp "
                                      "--ps-timeout 5 2>&1");
  EXPECT_NE(r.status, 124) << "the job hung: " << r.out;
  EXPECT_EQ(r.out.find("done: mlp"), std::string::npos) << r.out;
  for (int s = 0; s < 3; ++s)
    EXPECT_NE(r.out.find("parameter server " + std::to_string(s) +
                         " stops: a worker failed (rank 0: "),
              std::string::npos)
        << s << ": " << r.out;
}

}  // namespace
