// braid run, end to end: the real `braid` binary (BRAID_BIN) on small shell
// programs, and on this test binary itself as a rank (RunChild.*).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "braid/env.h"
#include "support/ports.h"
#include "support/tool.h"
#include "braid/launch.h"
#include "braid/store.h"
#include "comm/setup/bootstrap.h"

using namespace std::chrono_literals;

namespace {

// "[k]", the prefix braid run puts on rank k's lines. (Built by appending:
// GCC 12 warns falsely (-Wrestrict) on "literal" + std::string&&.)
std::string rank_tag(int k) {
  std::string s = "[";
  s += std::to_string(k);
  s += ']';
  return s;
}

struct Result {
  int status = -1;  // shell-style: exit code, or 128 + signal
  std::string out, err;
  double seconds = 0;
};

struct Running {
  pid_t pid = -1;
  int out = -1, err = -1;
  double start = 0;
};

using braid::testing::braid_bin;
using braid::testing::free_port;


Running start(const std::vector<std::string>& argv, const std::vector<std::string>& env = {}) {
  int o[2], e[2];
  EXPECT_EQ(::pipe(o), 0);
  EXPECT_EQ(::pipe(e), 0);
  Running r;
  r.start = braid::now_s();
  r.pid = ::fork();
  if (r.pid == 0) {
    ::dup2(o[1], 1);
    ::dup2(e[1], 2);
    ::close(o[0]);
    ::close(e[0]);
    ::close(o[1]);
    ::close(e[1]);
    for (auto& kv : env) ::putenv(const_cast<char*>(kv.c_str()));
    std::vector<char*> a;
    for (auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    ::execv(a[0], a.data());
    ::_exit(126);
  }
  ::close(o[1]);
  ::close(e[1]);
  r.out = o[0];
  r.err = e[0];
  return r;
}

// Collects output until exit; kills the process group after `limit`.
Result finish(Running r, std::chrono::seconds limit = 30s) {
  Result res;
  std::vector<pollfd> p = {{r.out, POLLIN, 0}, {r.err, POLLIN, 0}};
  int open = 2;
  bool killed = false;
  while (open > 0) {
    ::poll(p.data(), 2, 100);
    for (int i = 0; i < 2; ++i) {
      if (p[size_t(i)].fd < 0 || !(p[size_t(i)].revents & (POLLIN | POLLHUP))) continue;
      char buf[65536];
      ssize_t k = ::read(p[size_t(i)].fd, buf, sizeof buf);
      if (k <= 0) {
        ::close(p[size_t(i)].fd);
        p[size_t(i)].fd = -1;
        --open;
      } else {
        (i == 0 ? res.out : res.err).append(buf, size_t(k));
      }
    }
    if (!killed && braid::now_s() - r.start > double(limit.count())) {
      ::kill(r.pid, SIGKILL);
      killed = true;
      ADD_FAILURE() << "braid run did not finish within " << limit.count() << " s";
    }
  }
  int st = 0;
  ::waitpid(r.pid, &st, 0);
  res.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  res.seconds = braid::now_s() - r.start;
  return res;
}

Result run(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
  std::vector<std::string> argv = {braid_bin(), "run"};
  argv.insert(argv.end(), args.begin(), args.end());
  return finish(start(argv, env));
}

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> v;
  std::istringstream in(s);
  std::string l;
  while (std::getline(in, l)) v.push_back(l);
  return v;
}

}  // namespace

TEST(BraidRun, PrefixesEveryLineWithItsRank) {
  auto r = run({"-n", "3", "--max-time", "20", "--", "sh", "-c",
                "echo first; echo second; echo oops >&2; printf 'no newline'"});
  EXPECT_EQ(r.status, 0) << r.err;
  auto out = lines(r.out);
  EXPECT_EQ(out.size(), 9u) << r.out;
  for (int k = 0; k < 3; ++k) {
    std::string p = rank_tag(k) + " ";
    EXPECT_NE(r.out.find(p + "first\n"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(p + "second\n"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(p + "no newline\n"), std::string::npos) << r.out;
    EXPECT_NE(r.err.find(p + "oops\n"), std::string::npos) << r.err;
  }
  // The two lines of one rank keep their order.
  EXPECT_LT(r.out.find("[1] first"), r.out.find("[1] second"));
}

TEST(BraidRun, LinesNeverInterleave) {
  // Four ranks each write 3000 lines of 300 copies of their rank digit as
  // fast as they can; every line must come out whole, with the right prefix.
  auto r = run({"-n", "4", "--max-time", "40", "--", "sh", "-c",
                "awk -v r=$BRAID_RANK 'BEGIN { s = \"\"; for (i = 0; i < 300; i++) s = s r;"
                " for (j = 0; j < 3000; j++) print s }'"});
  EXPECT_EQ(r.status, 0) << r.err;
  std::map<int, int> count;
  int bad = 0;
  for (auto& l : lines(r.out)) {
    if (l.size() != 304 || l[0] != '[' || l[2] != ']' || l[3] != ' ' ||
        l.find_first_not_of(l[1], 4) != std::string::npos) {
      if (++bad < 3) ADD_FAILURE() << "mangled line: " << l.substr(0, 80);
      continue;
    }
    count[l[1] - '0']++;
  }
  EXPECT_EQ(bad, 0);
  for (int k = 0; k < 4; ++k) EXPECT_EQ(count[k], 3000) << "rank " << k;
}

TEST(BraidRun, Rank0Only) {
  auto r = run({"-n", "3", "--rank0-only", "--max-time", "20", "--", "sh", "-c",
                "echo out $BRAID_RANK; echo err $BRAID_RANK >&2"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "[0] out 0\n");
  for (int k = 0; k < 3; ++k)
    EXPECT_NE(r.err.find(rank_tag(k) + " err " + std::to_string(k)), std::string::npos)
        << r.err;
}

TEST(BraidRun, EnvironmentOfEachRank) {
  auto r = run({"-n", "3", "--timeout", "42", "--max-time", "20", "--", "sh", "-c",
                "echo R=$BRAID_RANK W=$BRAID_WORLD_SIZE L=$BRAID_LOCAL_RANK "
                "LW=$BRAID_LOCAL_WORLD_SIZE N=$BRAID_NODE_RANK T=$RANK/$WORLD_SIZE/$LOCAL_RANK "
                "S=$BRAID_STORE K=$BRAID_SECRET TO=$BRAID_TIMEOUT"});
  EXPECT_EQ(r.status, 0) << r.err;
  std::regex re(R"(\[(\d)\] R=(\d) W=3 L=(\d) LW=3 N=0 T=(\d)/3/(\d) S=127\.0\.0\.1:\d+ K=([0-9a-f]{64}) TO=42)");
  std::set<int> seen;
  std::set<std::string> secrets, stores;
  for (auto& l : lines(r.out)) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(l, m, re)) << l;
    EXPECT_EQ(m[1], m[2]);
    EXPECT_EQ(m[1], m[3]);
    EXPECT_EQ(m[1], m[4]);
    EXPECT_EQ(m[1], m[5]);
    seen.insert(std::stoi(m[1]));
    secrets.insert(m[6]);
    stores.insert(l.substr(l.find("S="), l.find(" K=") - l.find("S=")));
  }
  EXPECT_EQ(seen, (std::set<int>{0, 1, 2}));
  EXPECT_EQ(secrets.size(), 1u);
  EXPECT_EQ(stores.size(), 1u);
}

TEST(BraidRun, FailingRankStopsTheOthers) {
  auto r = run({"-n", "4", "--grace", "2", "--max-time", "50", "--", "sh", "-c",
                "if [ \"$BRAID_RANK\" = 2 ]; then sleep 0.3; exit 3; fi; sleep 100"});
  EXPECT_EQ(r.status, 3) << r.err;
  EXPECT_LT(r.seconds, 10.0);
  std::regex re(R"(braid run: rank 2 \(pid \d+ on host .+\) exited with status 3; stopped the other 3 ranks)");
  EXPECT_TRUE(std::regex_search(r.err, re)) << r.err;
}

TEST(BraidRun, RanksThatIgnoreSigtermAreKilledAfterTheGrace) {
  auto r = run({"-n", "3", "--grace", "1", "--max-time", "50", "--", "sh", "-c",
                "trap '' TERM; if [ \"$BRAID_RANK\" = 0 ]; then sleep 0.3; kill -KILL $$; fi;"
                " sleep 100"});
  EXPECT_EQ(r.status, 137) << r.err;
  EXPECT_LT(r.seconds, 10.0);
  EXPECT_NE(r.err.find("rank 0 (pid"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("was killed by signal 9 (SIGKILL); stopped the other 2 ranks"),
            std::string::npos)
      << r.err;
}

TEST(BraidRun, AllSucceedIsZeroAndMissingProgramIs127) {
  EXPECT_EQ(run({"-n", "2", "--", "true"}).status, 0);
  auto r = run({"-n", "2", "--", "/nonexistent/program"});
  EXPECT_EQ(r.status, 127);
  EXPECT_NE(r.err.find("/nonexistent/program"), std::string::npos) << r.err;
  // Without "--" the first word that is not an option starts the program.
  auto r2 = run({"-n", "2", "echo", "-n", "hi"});
  EXPECT_EQ(r2.status, 0) << r2.err;
  EXPECT_NE(r2.out.find("[1] hi"), std::string::npos) << r2.out;
}

TEST(BraidRun, ForwardsSigint) {
  auto p = start({braid_bin(), "run", "-n", "2", "--max-time", "50", "--", "sh", "-c",
                  "trap 'echo got INT; exit 7' INT; echo ready; sleep 100 & wait"});
  // Wait until both ranks are up (their "ready" lines are in the pipe; the
  // first line arriving is enough to know the launcher is in its loop).
  std::this_thread::sleep_for(700ms);
  ::kill(p.pid, SIGINT);
  auto r = finish(p);
  EXPECT_EQ(r.status, 130) << r.err;
  EXPECT_NE(r.out.find("[0] got INT"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[1] got INT"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("received SIGINT"), std::string::npos) << r.err;
}

TEST(BraidRun, TwoNodesOnOneHostFormOneJob) {
  int port = free_port();
  std::string master = "127.0.0.1:" + std::to_string(port);
  std::vector<std::string> env = {"BRAID_SECRET=two-node-test-secret"};
  auto cmd = [&](int node) {
    return std::vector<std::string>{braid_bin(), "run", "-n", "2", "--nnodes", "2", "--node-rank",
                                    std::to_string(node), "--master", master, "--timeout", "20",
                                    "--max-time", "40", "--", "sh", "-c",
                                    "echo rank $BRAID_RANK of $BRAID_WORLD_SIZE node "
                                    "$BRAID_NODE_RANK local $BRAID_LOCAL_RANK"};
  };
  auto p1 = start(cmd(1), env);  // node 1 first: it waits for node 0's store
  std::this_thread::sleep_for(200ms);
  auto p0 = start(cmd(0), env);
  auto r0 = finish(p0), r1 = finish(p1);
  EXPECT_EQ(r0.status, 0) << r0.err;
  EXPECT_EQ(r1.status, 0) << r1.err;
  std::set<std::string> seen;
  for (auto& l : lines(r0.out + r1.out)) seen.insert(l);
  EXPECT_EQ(seen, (std::set<std::string>{"[0] rank 0 of 4 node 0 local 0",
                                         "[1] rank 1 of 4 node 0 local 1",
                                         "[2] rank 2 of 4 node 1 local 0",
                                         "[3] rank 3 of 4 node 1 local 1"}))
      << r0.out << r1.out;
}

TEST(BraidRun, FailureOnOneNodeStopsTheOtherNode) {
  int port = free_port();
  std::string master = "127.0.0.1:" + std::to_string(port);
  std::vector<std::string> env = {"BRAID_SECRET=two-node-test-secret"};
  auto cmd = [&](int node) {
    return std::vector<std::string>{
        braid_bin(), "run", "-n", "2", "--nnodes", "2", "--node-rank", std::to_string(node),
        "--master", master, "--grace", "2", "--timeout", "20", "--max-time", "50", "--", "sh", "-c",
        "if [ \"$BRAID_RANK\" = 3 ]; then sleep 0.5; exit 5; fi; sleep 100"};
  };
  auto p0 = start(cmd(0), env);
  auto p1 = start(cmd(1), env);
  auto r0 = finish(p0), r1 = finish(p1);
  EXPECT_EQ(r0.status, 5) << r0.err;
  EXPECT_EQ(r1.status, 5) << r1.err;
  EXPECT_LT(r0.seconds, 15.0);
  EXPECT_NE(r0.err.find("rank 3 (pid"), std::string::npos) << r0.err;
  EXPECT_NE(r1.err.find("rank 3 (pid"), std::string::npos) << r1.err;
}

TEST(BraidRun, MultiNodeNeedsASharedSecret) {
  auto p = start({braid_bin(), "run", "-n", "1", "--nnodes", "2", "--node-rank", "0", "--master",
                  "127.0.0.1:1", "--", "true"},
                 {"BRAID_SECRET="});
  auto r = finish(p);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("BRAID_SECRET"), std::string::npos) << r.err;
}

// Ranks that bootstrap from braid run's environment and meet in its store.
TEST(BraidRun, RanksBootstrapThroughTheLaunchersStore) {
  auto r = run({"-n", "3", "--max-time", "40", "--env", "BRAID_RUN_TEST_CHILD=bootstrap", "--",
                braid::self_exe()});
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  for (int k = 0; k < 3; ++k)
    EXPECT_NE(r.out.find(rank_tag(k) + " child ok: rank " + std::to_string(k) +
                         " of 3 via braid"),
              std::string::npos)
        << r.out << r.err;
}

// Rank side of RanksBootstrapThroughTheLaunchersStore: when this binary is
// started by braid run with BRAID_RUN_TEST_CHILD=bootstrap it acts as a rank
// and exits before GoogleTest's main, so no test case stands in for it.
int bootstrap_child() {
  auto fail = [](const std::string& why) {
    std::fprintf(stderr, "child failed: %s\n", why.c_str());
    std::fflush(stderr);
    return 1;
  };
  try {
    auto env = braid::comm::bootstrap_from_env(20s);
    if (env.source != "braid") return fail("source " + env.source);
    if (env.server) return fail("a rank hosts the store; the launcher should");
    env.store->set_str("hello/" + std::to_string(env.rank), std::to_string(env.rank * 10));
    std::vector<std::string> keys;
    for (int k = 0; k < env.size; ++k) keys.push_back("hello/" + std::to_string(k));
    env.store->wait(keys, 20s);
    for (int k = 0; k < env.size; ++k)
      if (env.store->get_str(keys[size_t(k)]) != std::to_string(k * 10)) return fail("value of " + keys[size_t(k)]);
    if (env.store->add("arrived", 1) > env.size) return fail("more arrivals than ranks");
    std::printf("child ok: rank %d of %d via %s\n", env.rank, env.size, env.source.c_str());
    std::fflush(stdout);
    return 0;
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}

[[maybe_unused]] const bool kChildRan = [] {
  if (braid::env_str("BRAID_RUN_TEST_CHILD").value_or("") == "bootstrap") std::_Exit(bootstrap_child());
  return false;
}();
