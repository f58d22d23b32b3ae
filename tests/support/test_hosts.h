// Test hosts: N pretend machines on this one, each a set of Linux
// namespaces of its own — network, UTS (host name node0, node1, ...), IPC
// and mount, with a private tmpfs on /dev/shm — joined by veth pairs to a
// bridge that lives in a namespace of its own too. Addresses come only from
// 198.18.0.0/15 (198.18.0.1, .2, ...) and exist only inside these
// namespaces; nothing is added to the machine's own network.
//
// A host is a holder process (`unshare ... sleep`) that keeps its
// namespaces alive; commands run on it through `nsenter -t HOLDER -u -i -m
// -n`. The holders die with the process that made them (PR_SET_PDEATHSIG),
// and the destructor deletes the links and kills every process left in the
// namespaces, so nothing outlives a test, even one that fails or crashes.
// The file system (apart from /dev/shm) and the PID namespace are shared.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "support/emulated_wire.h"

namespace braid::testing {

// A command started in the background on a test host; output to a file.
class HostJob {
 public:
  HostJob(pid_t pid, std::string out_path) : pid_(pid), out_(std::move(out_path)) {}
  HostJob(HostJob&& o) noexcept : pid_(o.pid_), out_(std::move(o.out_)), status_(o.status_) { o.pid_ = -1; }
  HostJob(const HostJob&) = delete;
  ~HostJob();  // kills the job's process group when still running

  // Waits until the job ends or `deadline` passes (then kills its process
  // group and returns -1). Exit status, or 128 + the signal.
  int wait(std::chrono::steady_clock::time_point deadline);
  // Whether it is still running (never waits; an ended job's status is kept).
  bool running();
  // Everything it wrote (stdout and stderr) so far.
  std::string output() const;
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_;
  std::string out_;
  int status_ = -1;
};

class TestHosts {
 public:
  // Makes `n` hosts; nullptr with `why` set when this machine forbids
  // namespaces (not root, no unshare/ip, a kernel without them).
  static std::unique_ptr<TestHosts> make(int n, std::string* why);
  ~TestHosts();
  TestHosts(const TestHosts&) = delete;

  int size() const { return int(hosts_.size()); }
  std::string name(int i) const { return "node" + std::to_string(i); }
  std::string address(int i) const { return "198.18.0." + std::to_string(i + 1); }
  // The prefix that runs a command on host i ("nsenter -t PID -u -i -m -n --").
  std::string enter(int i) const;

  // Runs `cmd` (through /bin/sh) on host i and waits: exit status and output.
  int run(int i, const std::string& cmd, std::string* out = nullptr) const;
  // Starts `cmd` on host i in its own process group, output to `out_path`.
  HostJob start(int i, const std::string& cmd, const std::string& out_path) const;
  // Bytes host i's eth0 (its link to the bridge) has received so far.
  uint64_t rx_bytes(int i) const;
  // SIGKILLs every process on host i (all that run in its namespaces but
  // the holder), as when a machine's processes are all killed at once; its
  // network stays, so its kernel closes their connections. Returns how many.
  int kill_host(int i) const;
  // Takes host i's link to the bridge down (or up), at the bridge's end.
  void set_link(int i, bool up) const;
  // Gives host i's link to the bridge delay and loss, each way, as `tc
  // qdisc add ... netem` on both its ends would (emulated_wire.h: this
  // kernel has no netem). The first call replaces the link's veth pair by
  // an emulated wire with the same names and addresses (connections open
  // across it break); later calls change its faults in place. Throws
  // std::runtime_error.
  void emulate_link(int i, const WireFaults& faults);
  // What host i's emulated wire has carried (zeros before emulate_link).
  WireStats wire_stats(int i) const;
  // Gives every host an /etc/hosts (bind-mounted in its own mount
  // namespace) naming every host at its address, as a cluster's DNS would;
  // the machine's own /etc/hosts is untouched. Throws std::runtime_error.
  void name_hosts(const std::string& dir) const;
  // From now on every command on host i (run, start, the launch agent)
  // runs on CPUs `list` only ("0", "1-3"; "" for all), as a real host runs
  // on its own cores: the hosts otherwise share all of this machine's.
  void set_cpus(int i, const std::string& list);
  // Writes DIR/agent, an executable that runs `agent HOST CMD...` on test
  // host HOST (entering its namespaces), for mpirun's --mca plm_rsh_agent
  // in place of ssh; returns its path. Throws std::runtime_error.
  std::string write_launch_agent(const std::string& dir) const;

 private:
  TestHosts() = default;
  struct Holder {
    pid_t pid = -1;
    std::string netns;  // readlink of /proc/PID/ns/net, to find every process in it
    std::string cpus;   // set_cpus
  };
  Holder spawn_holder(const std::string& script);
  std::string port_name(int i) const;
  std::string bridge_name() const { return "br" + tag_; }
  // Runs `cmd` in the switch's network namespace; throws when it fails.
  void on_switch(const std::string& cmd) const;
  // Puts host i's switch port on the bridge and up, and addresses its eth0.
  void plug_in(int i) const;
  void teardown();

  Holder switch_;
  std::vector<Holder> hosts_;
  std::vector<std::unique_ptr<EmulatedWire>> wires_;  // per host; null: its veth pair
  std::string tag_;  // per run: names of the bridge and the veths
};

// BRAID_TEST_HOSTS_REQUIRED=1 (CI sets it): a machine that cannot make test
// hosts fails the tests that need them instead of skipping them.
bool test_hosts_required();

}  // namespace braid::testing

// Ends a test body (or a void helper it calls) whose namespaces this
// machine forbids, `why` saying what: skipped, naming why; under
// BRAID_TEST_HOSTS_REQUIRED=1 failed instead, so CI cannot pass with the
// namespace tests silently skipped.
#define BRAID_NAMESPACES_FORBIDDEN(why)                                              \
  do {                                                                               \
    if (::braid::testing::test_hosts_required())                                     \
      FAIL() << (why) << " (BRAID_TEST_HOSTS_REQUIRED=1: test hosts must run here)"; \
    GTEST_SKIP() << (why);                                                           \
  } while (0)

// Declares `hosts`, `n` test hosts, in a test body (or a void helper it
// calls); where the machine forbids them, BRAID_NAMESPACES_FORBIDDEN.
#define BRAID_TEST_HOSTS(hosts, n)                                   \
  std::string hosts##_why;                                           \
  auto hosts = ::braid::testing::TestHosts::make((n), &hosts##_why); \
  if (!hosts) BRAID_NAMESPACES_FORBIDDEN(hosts##_why)
