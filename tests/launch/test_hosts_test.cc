// The test hosts themselves (support/test_hosts.h): each has its own host
// name, address, IPC namespace and /dev/shm; the machine's own network is
// not touched; and tearing them down leaves no process, namespace or link,
// even a process that detached itself on a host.
#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "support/test_hosts.h"
#include "support/tool.h"

namespace {

using braid::testing::TestHosts;

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string own(const char* what) {
  char buf[128];
  ssize_t n = ::readlink(what, buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, size_t(n)) : "";
}

int processes_in(const std::string& netns) {
  int count = 0;
  DIR* d = ::opendir("/proc");
  while (dirent* e = d ? ::readdir(d) : nullptr) {
    if (std::atoi(e->d_name) <= 0) continue;
    if (own(("/proc/" + std::string(e->d_name) + "/ns/net").c_str()) == netns) ++count;
  }
  if (d) ::closedir(d);
  return count;
}

TEST(TestHosts, EachHostIsItsOwnMachineAndNothingOutlivesThem) {
  // This machine's own network (other tests may change it meanwhile, so
  // only what these hosts could add is looked for).
  std::string tag = "p";
  tag += std::to_string(::getpid());
  auto untouched = [&tag] {
    const std::string links = braid::testing::run_command("ip -br link").out;
    const std::string addrs = braid::testing::run_command("ip -4 -br addr").out;
    return links.find(tag) == std::string::npos && addrs.find("198.18.") == std::string::npos;
  };
  BRAID_TEST_HOSTS(hosts, 2);
  const std::string shm_file = "/dev/shm/braid_test_hosts_" + std::to_string(::getpid());
  std::string netns[2], ipc[2];
  for (int i = 0; i < 2; ++i) {
    std::string out;
    ASSERT_EQ(hosts->run(i, "uname -n", &out), 0) << out;
    EXPECT_EQ(trim(out), "node" + std::to_string(i));
    ASSERT_EQ(hosts->run(i, "ip -4 -br addr show eth0", &out), 0) << out;
    EXPECT_NE(out.find("198.18.0." + std::to_string(i + 1) + "/24"), std::string::npos) << out;
    ASSERT_EQ(hosts->run(i, "readlink /proc/self/ns/net", &out), 0) << out;
    netns[i] = trim(out);
    ASSERT_EQ(hosts->run(i, "readlink /proc/self/ns/ipc", &out), 0) << out;
    ipc[i] = trim(out);
    EXPECT_NE(netns[i], own("/proc/self/ns/net"));
    EXPECT_NE(ipc[i], own("/proc/self/ns/ipc"));
  }
  EXPECT_NE(netns[0], netns[1]);
  EXPECT_NE(ipc[0], ipc[1]);
  // /dev/shm: a file made on node0 is neither on node1 nor here.
  ASSERT_EQ(hosts->run(0, "echo x > " + shm_file), 0);
  EXPECT_EQ(hosts->run(0, "test -e " + shm_file), 0);
  EXPECT_NE(hosts->run(1, "test -e " + shm_file), 0);
  EXPECT_NE(::access(shm_file.c_str(), F_OK), 0);
  // Nothing added to this machine's network.
  EXPECT_TRUE(untouched());
  // A process that leaves its parent behind on node1 is still ended.
  ASSERT_EQ(hosts->run(1, "setsid sleep 60 </dev/null >/dev/null 2>&1 &"), 0);
  EXPECT_GE(processes_in(netns[1]), 2);  // the holder and the sleep
  const auto t0 = std::chrono::steady_clock::now();
  hosts.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_EQ(processes_in(netns[0]), 0);
  EXPECT_EQ(processes_in(netns[1]), 0);
  EXPECT_TRUE(untouched());
}

}  // namespace
