// launch::Supervisor with real processes, in both of its forms: exec'd
// programs with prefixed output (how `braid run` starts ranks) and forks of
// this process through run_forked (how `braid bench -n N` and `braid train
// --dp N` do). Each test runs the supervisor in a child process of its own,
// so that it can be sent signals, and the ranks report their pids through
// files so the test can check that none outlives the job.
#include "braid/supervisor.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "braid/env.h"
#include "braid/error.h"
#include "braid/store.h"
#include "braid/survivable.h"
#include "launch/spawn.h"
#include "support/multiproc.h"

using namespace std::chrono_literals;
using braid::launch::ForkedRank;
using braid::launch::Supervisor;
using braid::launch::SupervisorOptions;

namespace {

// How the supervisor's process ended and what it wrote.
struct Outcome {
  bool exited = false;  // false: it was killed by a signal itself
  int status = -1;
  std::string out, err;
};

// Runs `supervise` (which returns the job's status) in a child process with
// its stdout and stderr captured; `meanwhile(pid)` runs in the test while it
// does. A supervisor still running after 60 s is killed and fails the test.
Outcome run_supervisor(const std::function<int()>& supervise,
                       const std::function<void(pid_t)>& meanwhile = nullptr) {
  int o[2], e[2];
  EXPECT_EQ(::pipe(o), 0);
  EXPECT_EQ(::pipe(e), 0);
  std::fflush(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(o[1], 1);
    ::dup2(e[1], 2);
    for (int fd : {o[0], o[1], e[0], e[1]}) ::close(fd);
    int status = 99;
    try {
      status = supervise();
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "the supervisor threw: %s\n", ex.what());
    }
    std::fflush(nullptr);
    ::_exit(status);
  }
  ::close(o[1]);
  ::close(e[1]);
  if (meanwhile) meanwhile(pid);
  Outcome res;
  std::vector<pollfd> p = {{o[0], POLLIN, 0}, {e[0], POLLIN, 0}};
  const double give_up = braid::now_s() + 60;
  bool killed = false;
  for (int open = 2; open > 0;) {
    ::poll(p.data(), p.size(), 100);
    for (size_t i = 0; i < p.size(); ++i) {
      if (p[i].fd < 0 || !(p[i].revents & (POLLIN | POLLHUP))) continue;
      char buf[4096];
      ssize_t k = ::read(p[i].fd, buf, sizeof buf);
      if (k > 0) {
        (i == 0 ? res.out : res.err).append(buf, size_t(k));
        continue;
      }
      ::close(p[i].fd);
      p[i].fd = -1;
      --open;
    }
    if (!killed && braid::now_s() > give_up) {
      ::kill(pid, SIGKILL);
      killed = true;
      ADD_FAILURE() << "the supervisor did not finish within 60 s";
    }
  }
  int st = 0;
  ::waitpid(pid, &st, 0);
  res.exited = WIFEXITED(st);
  res.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return res;
}

// The pid in dir/<name>, once a rank has written it (write, then rename).
pid_t await_pid(const std::string& dir, const std::string& name) {
  const std::string path = dir + "/" + name;
  const double give_up = braid::now_s() + 30;
  while (!std::filesystem::exists(path)) {
    if (braid::now_s() > give_up) {
      ADD_FAILURE() << "no " << path << " after 30 s";
      return -1;
    }
    std::this_thread::sleep_for(20ms);
  }
  pid_t pid = -1;
  std::ifstream(path) >> pid;
  return pid;
}

void write_pid(const std::string& dir, const std::string& name) {
  const std::string tmp = dir + "/." + name;
  std::ofstream(tmp) << ::getpid() << '\n';
  std::filesystem::rename(tmp, dir + "/" + name);
}

// False once `pid` has ended (no process, or a zombie waiting for init).
// An ended process never comes back, so this waits up to 10 s for it.
bool still_running(pid_t pid) {
  const double give_up = braid::now_s() + 10;
  for (;;) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string text;
    std::getline(stat, text);
    size_t paren = text.rfind(')');
    if (!stat || paren == std::string::npos || paren + 2 >= text.size()) return false;
    char state = text[paren + 2];
    if (state == 'Z' || state == 'X') return false;
    if (braid::now_s() > give_up) return true;
    std::this_thread::sleep_for(20ms);
  }
}

// The one summary line the supervisor writes (the last line of stderr).
std::string summary(const Outcome& o) {
  std::string err = o.err;
  while (!err.empty() && err.back() == '\n') err.pop_back();
  size_t nl = err.rfind('\n');
  return nl == std::string::npos ? err : err.substr(nl + 1);
}

// `braid run`'s form: n ranks of /bin/sh -c `script`, each with R=<rank>
// and D=<dir> in its environment.
int supervise_sh(int n, const std::string& script, const std::string& dir,
                 SupervisorOptions opt = {}) {
  Supervisor sup(opt);
  for (int i = 0; i < n; ++i)
    sup.start_exec("/bin/sh", {"sh", "-c", script},
                   braid::launch::merged_environment({"R=" + std::to_string(i), "D=" + dir}));
  return sup.wait();
}

// Shell: record this rank's pid as pid.$R (atomically), then `then`.
std::string sh_record_pid(const std::string& then) {
  return "echo $$ > $D/.pid.$R && mv $D/.pid.$R $D/pid.$R; " + then;
}

const char* const kForkedTools[] = {"braid bench", "braid train"};

}  // namespace

TEST(Supervisor, ExecRankExiting3StopsTheOthersAndIsNamed) {
  const std::string dir = braid::testing::temp_dir("sup_exec3");
  // Rank 1 fails once ranks 0 and 2 are up; they would sleep for 100 s.
  const std::string script = sh_record_pid(
      "if [ $R = 1 ]; then while [ ! -e $D/pid.0 ] || [ ! -e $D/pid.2 ]; do sleep 0.05; done;"
      " echo failing; exit 3; fi; exec sleep 100");
  Outcome o = run_supervisor([&] { return supervise_sh(3, script, dir); });
  EXPECT_TRUE(o.exited);
  EXPECT_EQ(o.status, 3) << o.err;
  std::smatch m;
  const std::string line = summary(o);
  ASSERT_TRUE(std::regex_match(line, m, std::regex(R"(braid run: rank 1 \(pid (\d+) on host .+\) exited with status 3; stopped the other 2 ranks)")))
      << o.err;
  EXPECT_EQ(std::stoi(m[1]), await_pid(dir, "pid.1"));
  EXPECT_EQ(o.out, "[1] failing\n");
  for (const char* rank : {"pid.0", "pid.2"})
    EXPECT_FALSE(still_running(await_pid(dir, rank))) << rank << " outlived the job";
}

TEST(Supervisor, ForkedRankExiting3StopsTheOthersAndIsNamed) {
  for (const char* tool : kForkedTools) {
    SCOPED_TRACE(tool);
    const std::string dir = braid::testing::temp_dir("sup_fork3");
    Outcome o = run_supervisor([&] {
      return braid::launch::run_forked(tool, 3, [&](const ForkedRank& r) {
        write_pid(dir, "pid." + std::to_string(r.rank));
        if (r.rank != 1) std::this_thread::sleep_for(100s);
        await_pid(dir, "pid.0");
        await_pid(dir, "pid.2");
        return 3;
      });
    });
    EXPECT_TRUE(o.exited);
    EXPECT_EQ(o.status, 3) << o.err;
    std::smatch m;
    const std::string line = summary(o);
    ASSERT_TRUE(std::regex_match(line, m, std::regex(std::string(tool) + R"(: rank 1 \(pid (\d+) on host .+\) exited with status 3; stopped the other 2 ranks)")))
        << o.err;
    EXPECT_EQ(std::stoi(m[1]), await_pid(dir, "pid.1"));
    for (const char* rank : {"pid.0", "pid.2"})
      EXPECT_FALSE(still_running(await_pid(dir, rank))) << rank << " outlived the job";
  }
}

TEST(Supervisor, RankKilledBySignalIsNamedWithTheSignal) {
  const std::string dir = braid::testing::temp_dir("sup_signal");
  Outcome run = run_supervisor([&] {
    return supervise_sh(3, sh_record_pid("if [ $R = 2 ]; then while [ ! -e $D/pid.0 ] || "
                                         "[ ! -e $D/pid.1 ]; do sleep 0.05; done; kill -KILL $$;"
                                         " fi; exec sleep 100"),
                        dir);
  });
  EXPECT_EQ(run.status, 137) << run.err;
  EXPECT_TRUE(std::regex_match(summary(run), std::regex(R"(braid run: rank 2 \(pid \d+ on host .+\) was killed by signal 9 \(SIGKILL\); stopped the other 2 ranks)")))
      << run.err;
  for (const char* rank : {"pid.0", "pid.1"})
    EXPECT_FALSE(still_running(await_pid(dir, rank))) << rank << " outlived the job";

  for (const char* tool : kForkedTools) {
    SCOPED_TRACE(tool);
    Outcome o = run_supervisor([&] {
      return braid::launch::run_forked(tool, 2, [](const ForkedRank& r) {
        if (r.rank == 0) ::raise(SIGUSR1);
        std::this_thread::sleep_for(100s);
        return 0;
      });
    });
    EXPECT_EQ(o.status, 128 + SIGUSR1) << o.err;
    EXPECT_TRUE(std::regex_match(summary(o), std::regex(std::string(tool) + R"(: rank 0 \(pid \d+ on host .+\) was killed by signal )" + std::to_string(SIGUSR1) + R"( \(SIGUSR1\); stopped the other 1 rank)")))
        << o.err;
  }
}

TEST(Supervisor, SigtermToTheSupervisorLeavesNoProcessBehind) {
  // braid run's form, each rank with a background child of its own that
  // ignores SIGTERM: only the final sweep of the rank's group ends it.
  const std::string dir = braid::testing::temp_dir("sup_term_exec");
  const std::string script = "(trap '' TERM; exec sleep 100) & echo $! > $D/.bg.$R && "
                             "mv $D/.bg.$R $D/bg.$R; " + sh_record_pid("wait");
  std::vector<pid_t> pids;
  Outcome run = run_supervisor([&] { return supervise_sh(3, script, dir); },
                               [&](pid_t sup) {
                                 for (int r = 0; r < 3; ++r)
                                   for (const char* f : {"pid.", "bg."})
                                     pids.push_back(await_pid(dir, f + std::to_string(r)));
                                 ::kill(sup, SIGTERM);
                               });
  EXPECT_TRUE(run.exited) << "the supervisor itself died of the signal";
  EXPECT_EQ(run.status, 128 + SIGTERM) << run.err;
  EXPECT_EQ(summary(run), "braid run: received SIGTERM; stopped all 3 local ranks") << run.err;
  ASSERT_EQ(pids.size(), 6u);
  for (pid_t p : pids) EXPECT_FALSE(still_running(p)) << "pid " << p << " outlived the job";

  for (const char* tool : kForkedTools) {
    SCOPED_TRACE(tool);
    const std::string fdir = braid::testing::temp_dir("sup_term_fork");
    std::vector<pid_t> ranks;
    Outcome o = run_supervisor(
        [&] {
          return braid::launch::run_forked(tool, 3, [&](const ForkedRank& r) {
            write_pid(fdir, "pid." + std::to_string(r.rank));
            std::this_thread::sleep_for(100s);
            return 0;
          });
        },
        [&](pid_t sup) {
          for (int r = 0; r < 3; ++r) ranks.push_back(await_pid(fdir, "pid." + std::to_string(r)));
          ::kill(sup, SIGTERM);
        });
    EXPECT_TRUE(o.exited) << "the supervisor itself died of the signal";
    EXPECT_EQ(o.status, 128 + SIGTERM) << o.err;
    EXPECT_EQ(summary(o), std::string(tool) + ": received SIGTERM; stopped all 3 local ranks");
    for (pid_t p : ranks) EXPECT_FALSE(still_running(p)) << "pid " << p << " outlived the job";
  }
}

TEST(Supervisor, Sigusr1IsForwardedToEachRankAndStopsNothing) {
  // SIGUSR1 asks every rank to dump its flight recorder: each rank's own pid
  // gets it, and the job goes on (here each rank's trap prints and exits 0).
  const std::string dir = braid::testing::temp_dir("sup_usr1");
  const std::string script =
      "trap 'echo dumped $R; exit 0' USR1; " + sh_record_pid("while :; do sleep 0.05; done");
  Outcome run = run_supervisor([&] { return supervise_sh(2, script, dir); },
                               [&](pid_t sup) {
                                 for (int r = 0; r < 2; ++r) await_pid(dir, "pid." + std::to_string(r));
                                 ::kill(sup, SIGUSR1);
                               });
  EXPECT_TRUE(run.exited) << "the supervisor itself died of the signal";
  EXPECT_EQ(run.status, 0) << run.err;
  EXPECT_NE(run.out.find("[0] dumped 0\n"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("[1] dumped 1\n"), std::string::npos) << run.out;
  EXPECT_EQ(run.err.find("braid run:"), std::string::npos) << run.err;
}

TEST(Supervisor, AllRanksExitingZeroIsStatusZeroAndNoSummary) {
  const std::string dir = braid::testing::temp_dir("sup_zero");
  Outcome run = run_supervisor([&] { return supervise_sh(2, "echo hello $R; echo note $R >&2", dir); });
  EXPECT_TRUE(run.exited);
  EXPECT_EQ(run.status, 0) << run.err;
  EXPECT_NE(run.out.find("[0] hello 0\n"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("[1] hello 1\n"), std::string::npos) << run.out;
  EXPECT_NE(run.err.find("[1] note 1\n"), std::string::npos) << run.err;
  EXPECT_EQ(run.err.find("braid run:"), std::string::npos) << run.err;

  // Forked ranks meet through the store and secret run_forked gives them:
  // an all-reduce of the ranks' numbers comes out right on every rank.
  for (const char* tool : kForkedTools) {
    SCOPED_TRACE(tool);
    Outcome o = run_supervisor([&] {
      return braid::launch::run_forked(tool, 3, [](const ForkedRank& r) {
        if (r.size != 3) return 10;
        auto comm = r.communicator();
        double mine = r.rank + 1, sum = 0;
        comm->all_reduce(&mine, &sum, 1, braid::DType::kF64, braid::ReduceOp::kSum);
        std::printf("rank %d sum %g\n", r.rank, sum);
        return sum == 6 ? 0 : 11;
      });
    });
    EXPECT_TRUE(o.exited);
    EXPECT_EQ(o.status, 0) << o.out << o.err;
    for (int r = 0; r < 3; ++r)  // output goes straight through, without prefixes
      EXPECT_NE(o.out.find("rank " + std::to_string(r) + " sum 6\n"), std::string::npos) << o.out;
    EXPECT_EQ(o.err.find(tool), std::string::npos) << o.err;
  }
}

TEST(Supervisor, ForkedRankThatThrowsOrReturnsOutOfRangeFails) {
  Outcome thrown = run_supervisor([] {
    return braid::launch::run_forked("braid train", 2, [](const ForkedRank& r) -> int {
      if (r.rank == 1) throw braid::Error(braid::Errc::kInvalidArgument, "no such model");
      std::this_thread::sleep_for(100s);
      return 0;
    });
  });
  EXPECT_EQ(thrown.status, 1) << thrown.err;
  EXPECT_NE(thrown.err.find("braid train: rank 1: no such model"), std::string::npos) << thrown.err;
  EXPECT_TRUE(std::regex_match(summary(thrown), std::regex(R"(braid train: rank 1 \(pid \d+ on host .+\) exited with status 1; stopped the other 1 rank)")))
      << thrown.err;
  // 256 would read as 0 after the truncation to 8 bits that exit() does.
  Outcome wide = run_supervisor(
      [] { return braid::launch::run_forked("braid bench", 1, [](const ForkedRank&) { return 256; }); });
  EXPECT_EQ(wide.status, 1) << wide.err;
}

// A rank that marked its death survivable dies (SIGKILL); the other two
// finish normally. The job's status is theirs, and one line names the dead
// rank with its reason. Rank 2 of the second job then fails: that still
// stops the job, and the summary counts only the ranks that were stopped.
TEST(Supervisor, RankMarkedSurvivableDiesAndTheJobGoesOn) {
  for (const bool then_fail : {false, true}) {
    SCOPED_TRACE(then_fail ? "then rank 2 fails" : "the others finish");
    const std::string dir = braid::testing::temp_dir("sup_survivable");
    Outcome o = run_supervisor([&] {
      return braid::launch::run_forked("braid ps", 3, [&](const ForkedRank& r) {
        auto store = braid::make_file_store(r.store_dir);
        if (r.rank == 1) {
          braid::launch::mark_survivable(*store, 1, "a spare");
          write_pid(dir, "pid.1");
          ::raise(SIGKILL);
        }
        // Once rank 1 is reaped (its /proc entry gone), the supervisor has
        // decided about its death.
        const pid_t dead = await_pid(dir, "pid.1");
        while (::kill(dead, 0) == 0) std::this_thread::sleep_for(10ms);
        if (then_fail && r.rank == 2) return 3;
        if (then_fail) std::this_thread::sleep_for(100s);
        return 0;
      });
    });
    EXPECT_TRUE(o.exited);
    const std::regex died(R"(braid ps: rank 1 \(pid \d+ on host .+\) was killed by signal 9 \(SIGKILL\); the job goes on \(a spare\)\n)");
    EXPECT_TRUE(std::regex_search(o.err, died)) << o.err;
    if (!then_fail) {
      EXPECT_EQ(o.status, 0) << o.err;
      EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
      continue;
    }
    EXPECT_EQ(o.status, 3) << o.err;
    EXPECT_TRUE(std::regex_match(summary(o), std::regex(R"(braid ps: rank 2 \(pid \d+ on host .+\) exited with status 3; stopped the other 1 rank)")))
        << o.err;
  }
}

TEST(Supervisor, TimeLimitStopsTheJobWith124) {
  const std::string dir = braid::testing::temp_dir("sup_time");
  SupervisorOptions opt;
  opt.max_time = 300ms;
  Outcome o = run_supervisor([&] { return supervise_sh(2, sh_record_pid("exec sleep 100"), dir, opt); });
  EXPECT_EQ(o.status, 124) << o.err;
  EXPECT_EQ(summary(o), "braid run: the job ran past its time limit (0.3 s); stopped all 2 local ranks");
  // A loaded machine may not have let a rank record its pid within the limit.
  for (const char* rank : {"pid.0", "pid.1"})
    if (std::filesystem::exists(dir + "/" + rank)) {
      EXPECT_FALSE(still_running(await_pid(dir, rank))) << rank << " outlived the job";
    }
}

TEST(Supervisor, OnlyOneAtATimePerProcess) {
  Supervisor first(SupervisorOptions{});
  try {
    Supervisor second(SupervisorOptions{});
    ADD_FAILURE() << "a second supervisor was made while the first was active";
  } catch (const braid::Error& e) {
    EXPECT_EQ(e.code(), braid::Errc::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("another launch is running"), std::string::npos) << e.what();
  }
  EXPECT_EQ(first.wait(), 0);  // no ranks: nothing to wait for
}
