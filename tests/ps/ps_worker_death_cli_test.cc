// A worker that dies without a goodbye (--kill-worker SIGKILLs it just
// before it pushes a step: no error path runs, nothing is posted), with
// real processes: 2 workers and 2 dedicated servers train the MLP under
// ASP and under k-of-n (K = 1), where no round waits for the dead worker.
//
// Under `mpirun --enable-recovery`, which lets the other ranks run on, the
// servers find worker 1 lost (its connections closed before its goodbye,
// ps/server/server_lost.cc) and the job fails: each server and worker 0 end with
// an error naming worker 1, the server that saw it and the operation that
// was waiting, and no rank reports a finished run. Open MPI's mpirun
// itself exits 0 under --enable-recovery whatever its ranks do, so the
// ranks' own error lines are what is checked. Under braid's own launchers
// (self-forked, braid run) the supervisor ends the job, naming the rank.
// A `timeout 60` around each job turns a hang into status 124, which fails
// the test (a bound far above the few seconds the failure takes, not a
// measure of speed).
//
// A server's death with --replicas 2 under the same mpirun is no lost
// worker: the workers re-route and training completes (also under ASP,
// where nothing else would notice a false verdict).
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>

#include "cli_test_util.h"
#include "support/test_hosts.h"
#include "support/tool.h"

namespace {

using braid::testing::braid_bin;
using braid::testing::CommandResult;
using braid::testing::run_command;

const std::string kTrain = " ps train mlp --steps 30 --batch 60 --threads 1 --quiet --workers 2 "
                           "--ps-timeout 120";
const std::string kKill = " --kill-worker 1:5";
const char* const kModes[] = {"--consistency asp", "--consistency kofn --round-k 1"};

using braid::testing::ps_cli::mpirun_missing;

// `mpirun --enable-recovery -n n` running braid with `args`; `wrap` goes
// before mpirun (inside the `timeout`).
CommandResult mpirun(int n, const std::string& args, const std::string& wrap = "") {
  const std::string root =
      ::geteuid() == 0 ? "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 " : "";
  return run_command(root + "BRAID_SECRET=ps-worker-death-test timeout 60 " + wrap +
                     "mpirun -x BRAID_SECRET -n " + std::to_string(n) +
                     " --oversubscribe --enable-recovery " + braid_bin() + kTrain + args + " 2>&1");
}

bool has(const CommandResult& r, const std::string& s) { return r.out.find(s) != std::string::npos; }

TEST(PsWorkerDeathCli, UnderMpirunWithRecoveryALostWorkerFailsEveryWaitingRank) {
  ASSERT_EQ(mpirun_missing(), "") << "scripts/deps.sh installs openmpi-bin";
  for (const char* mode : kModes) {
    SCOPED_TRACE(mode);
    const CommandResult r = mpirun(4, std::string(" --servers 2 ") + mode + kKill);
    ASSERT_NE(r.status, 124) << "the job hung: " << r.out;
    EXPECT_FALSE(has(r, "done: mlp")) << r.out;
    const std::string lost = "worker 1 was lost at clock ";
    // Each server's own error (ps_rank.cc's wait for the goodbyes), or,
    // when the other's posted failure reached it first, that failure ...
    for (int s = 0; s < 2; ++s) {
      const std::string own = "braid ps: error (peer died): parameter server " + std::to_string(s);
      const size_t at = r.out.find(own + ": " + lost) != std::string::npos
                            ? r.out.find(own + ": " + lost)
                            : r.out.find(own + " stops: a worker failed (");
      ASSERT_NE(at, std::string::npos) << s << ": " << r.out;
      EXPECT_NE(r.out.substr(at, r.out.find('\n', at) - at).find(lost), std::string::npos)
          << s << ": " << r.out;
    }
    // ... which a server that saw the drop itself states in full ...
    EXPECT_TRUE(has(r, ": its connection to parameter server ")) << r.out;
    EXPECT_TRUE(has(r, " closed without a goodbye")) << r.out;
    // ... and worker 0's: the operation it was in, then the lost worker.
    EXPECT_TRUE(has(r, "braid ps: error (peer died): parameter-server worker 0, server ")) << r.out;
    const size_t w0 = r.out.find("parameter-server worker 0, server ");
    ASSERT_NE(w0, std::string::npos) << r.out;
    const std::string line = r.out.substr(w0, r.out.find('\n', w0) - w0);
    EXPECT_TRUE(line.find(lost) != std::string::npos) << line;
    // The dead worker's updates are in no reported result, and nothing
    // waited for --ps-timeout.
    EXPECT_FALSE(has(r, "(timeout)")) << r.out;
  }
}

// A job with a killed rank leaves its file store's directory behind (its
// last rank never lets go). Open MPI derives the job id from mpirun's pid,
// and pids come round again: a later mpirun with the same pid once opened
// that directory, read the dead job's server addresses and verdict, and
// hung (a CI run, stop 50). Here each mpirun is pid 1 of a new pid
// namespace, so the two jobs have the same pid and the same job id: the
// second must start clean and finish.
TEST(PsWorkerDeathCli, UnderMpirunAJobWithAKilledJobsPidStartsClean) {
  ASSERT_EQ(mpirun_missing(), "") << "scripts/deps.sh installs openmpi-bin";
  // --kill-child: a job that outlives its `timeout` dies with its namespace.
  const std::string ns = "unshare --pid --fork --mount-proc --kill-child ";
  if (run_command(ns + "true").status != 0)
    BRAID_NAMESPACES_FORBIDDEN("this machine forbids new pid namespaces (unshare --pid, as root)");
  const std::string mode = " --servers 2 --consistency kofn --round-k 1";
  const CommandResult killed = mpirun(4, mode + kKill, ns);
  ASSERT_NE(killed.status, 124) << "the job hung: " << killed.out;
  ASSERT_TRUE(has(killed, "worker 1 was lost at clock ")) << killed.out;
  const CommandResult next = mpirun(4, mode, ns);
  ASSERT_NE(next.status, 124) << "the job hung: " << next.out;
  EXPECT_TRUE(has(next, "done: mlp 30 steps on 2 workers / 2 servers")) << next.out;
  EXPECT_FALSE(has(next, "was lost")) << next.out;
}

TEST(PsWorkerDeathCli, UnderBraidsLaunchersTheSupervisorEndsTheJobNamingTheWorker) {
  const std::string self = "timeout 60 " + braid_bin();
  const std::string run = "timeout 60 " + braid_bin() + " run -n 4 -- " + braid_bin();
  for (const std::string& prefix : {self, run})
    for (const char* mode : kModes) {
      SCOPED_TRACE(prefix + " " + mode);
      const CommandResult r =
          run_command(prefix + kTrain + " --servers 2 " + mode + kKill + " 2>&1");
      ASSERT_NE(r.status, 124) << "the job hung: " << r.out;
      EXPECT_NE(r.status, 0) << r.out;
      EXPECT_FALSE(has(r, "done: mlp")) << r.out;
      // Worker 1 is rank 1 (workers come first).
      EXPECT_TRUE(has(r, "rank 1 (pid ")) << r.out;
      EXPECT_TRUE(has(r, "was killed by signal 9 (SIGKILL); stopped the other 3 ranks")) << r.out;
    }
}

TEST(PsWorkerDeathCli, UnderMpirunWithRecoveryAServerFailOverIsNoLostWorker) {
  ASSERT_EQ(mpirun_missing(), "") << "scripts/deps.sh installs openmpi-bin";
  // Server 1 is the tail of shard 0's chain and the head of shard 1's: the
  // workers drop their connections to it and re-route to server 2 and 0.
  for (const char* mode : kModes) {
    SCOPED_TRACE(mode);
    const CommandResult r =
        mpirun(5, std::string(" --servers 3 --replicas 2 ") + mode + " --kill-server 1:7");
    ASSERT_NE(r.status, 124) << "the job hung: " << r.out;
    EXPECT_TRUE(has(r, "done: mlp 30 steps on 2 workers / 3 servers")) << r.out;
    EXPECT_FALSE(has(r, "was lost")) << r.out;
    EXPECT_FALSE(has(r, "braid ps: error")) << r.out;
  }
}

}  // namespace
