#include "support/test_hosts.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "braid/env.h"
#include "support/tool.h"

namespace braid::testing {
namespace {

using Clock = std::chrono::steady_clock;

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string ns_of(pid_t pid, const char* kind) {
  char buf[128];
  std::string p = "/proc/" + std::to_string(pid) + "/ns/" + kind;
  ssize_t n = ::readlink(p.c_str(), buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, size_t(n)) : std::string();
}

// Execs argv in the child of a fork; never returns.
[[noreturn]] void exec_argv(const std::vector<std::string>& argv) {
  std::vector<char*> v;
  for (auto& a : argv) v.push_back(const_cast<char*>(a.c_str()));
  v.push_back(nullptr);
  ::execvp(v[0], v.data());
  ::_exit(127);
}

// Every pid (but `keep`) whose network namespace is `netns`.
std::vector<pid_t> pids_in(const std::string& netns, pid_t keep) {
  std::vector<pid_t> out;
  DIR* d = ::opendir("/proc");
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (*end || pid <= 0 || pid == keep || pid == ::getpid()) continue;
    if (ns_of(pid_t(pid), "net") == netns) out.push_back(pid_t(pid));
  }
  ::closedir(d);
  return out;
}

}  // namespace

HostJob::~HostJob() {
  if (pid_ > 0 && status_ < 0) wait(Clock::now());
}

int HostJob::wait(Clock::time_point deadline) {
  if (pid_ <= 0 || status_ >= 0) return status_;
  for (;;) {
    int st = 0;
    pid_t r = ::waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      return status_;
    }
    if (r < 0 && errno != EINTR) return status_ = -1;
    if (Clock::now() >= deadline) {
      ::kill(-pid_, SIGKILL);
      ::waitpid(pid_, &st, 0);
      status_ = -1;
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

bool HostJob::running() {
  if (pid_ <= 0 || status_ >= 0) return false;
  int st = 0;
  if (::waitpid(pid_, &st, WNOHANG) != pid_) return true;
  status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return false;
}

std::string HostJob::output() const {
  std::ifstream f(out_);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::unique_ptr<TestHosts> TestHosts::make(int n, std::string* why) {
  if (::geteuid() != 0) {
    *why = "test hosts need root (network namespaces, veth pairs, a bridge)";
    return nullptr;
  }
  CommandResult probe = run_command("unshare --net --uts --ipc --mount --propagation private -- "
                                    "sh -c 'ip link set lo up && mount -t tmpfs tmpfs /dev/shm && "
                                    "ip link add b0 type bridge && ip link add v0 type veth peer name v1'");
  if (probe.status != 0) {
    *why = "this machine forbids what test hosts need (unshare --net --uts --ipc --mount, a "
           "tmpfs, a bridge and a veth pair in a new network namespace): " + probe.out;
    return nullptr;
  }
  std::unique_ptr<TestHosts> h(new TestHosts());
  h->tag_ = std::to_string(::getpid());
  h->wires_.resize(size_t(n));
  const std::string br = h->bridge_name();
  h->switch_ = h->spawn_holder("hostname switch && ip link set lo up && ip link add " + br +
                               " type bridge && ip link set " + br + " up");
  for (int i = 0; i < n; ++i) {
    h->hosts_.push_back(h->spawn_holder(
        "hostname " + h->name(i) +
        " && mount -t tmpfs -o size=1g,mode=1777 tmpfs /dev/shm && ip link set lo up"));
    h->on_switch("ip link add " + h->port_name(i) + " type veth peer name eth0 netns " +
                 std::to_string(h->hosts_[size_t(i)].pid));
    h->plug_in(i);
  }
  return h;
}

void TestHosts::on_switch(const std::string& cmd) const {
  const std::string full = "nsenter -t " + std::to_string(switch_.pid) + " -n -- " + cmd;
  CommandResult r = run_command(full);
  if (r.status != 0) throw std::runtime_error("test hosts: `" + full + "` failed: " + r.out);
}

void TestHosts::plug_in(int i) const {
  on_switch("ip link set " + port_name(i) + " master " + bridge_name() + " up");
  std::string out;
  if (run(i, "ip addr add " + address(i) + "/24 dev eth0 && ip link set eth0 up", &out) != 0)
    throw std::runtime_error("test hosts: addressing eth0 on " + name(i) + " failed: " + out);
}

TestHosts::Holder TestHosts::spawn_holder(const std::string& script) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("test hosts: pipe");
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("test hosts: fork");
  if (pid == 0) {
    // Dies with the test process, whatever ends it.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);
    ::dup2(fds[1], 1);
    int null = ::open("/dev/null", O_RDWR);
    ::dup2(null, 0);
    // The holder sleeps at most an hour even if nothing kills it.
    exec_argv({"unshare", "--uts", "--ipc", "--mount", "--net", "--propagation", "private", "--",
               "sh", "-c", script + " && echo ready && exec sleep 3600 >/dev/null"});
  }
  ::close(fds[1]);
  Holder h{pid, "", ""};
  // Its "ready" within 10 s, or it failed.
  std::string got;
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (got.find('\n') == std::string::npos && Clock::now() < deadline) {
    pollfd p{fds[0], POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[64];
    ssize_t k = ::read(fds[0], buf, sizeof buf);
    if (k <= 0) break;
    got.append(buf, size_t(k));
  }
  ::close(fds[0]);
  h.netns = ns_of(pid, "net");
  // Never touch the machine's own network: the holder must be elsewhere.
  if (got != "ready\n" || h.netns.empty() || h.netns == ns_of(::getpid(), "net") ||
      ns_of(pid, "uts") == ns_of(::getpid(), "uts")) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    throw std::runtime_error("test hosts: a namespace holder did not start (`" + script + "`): " + got);
  }
  return h;
}

std::string TestHosts::port_name(int i) const { return "v" + std::to_string(i) + "p" + tag_; }

std::string TestHosts::enter(int i) const {
  const Holder& h = hosts_.at(size_t(i));
  return "nsenter -t " + std::to_string(h.pid) + " -u -i -m -n --" +
         (h.cpus.empty() ? "" : " taskset -c " + h.cpus);
}

void TestHosts::set_cpus(int i, const std::string& list) { hosts_.at(size_t(i)).cpus = list; }

int TestHosts::run(int i, const std::string& cmd, std::string* out) const {
  CommandResult r = run_command(enter(i) + " sh -c " + quote(cmd));
  if (out) *out = r.out;
  return r.status;
}

HostJob TestHosts::start(int i, const std::string& cmd, const std::string& out_path) const {
  const std::string holder = std::to_string(hosts_.at(size_t(i)).pid);
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("test hosts: fork");
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    int fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int null = ::open("/dev/null", O_RDONLY);
    ::dup2(null, 0);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    const std::string& cpus = hosts_.at(size_t(i)).cpus;
    if (cpus.empty())
      exec_argv({"nsenter", "-t", holder, "-u", "-i", "-m", "-n", "--", "sh", "-c", cmd});
    exec_argv({"nsenter", "-t", holder, "-u", "-i", "-m", "-n", "--", "taskset", "-c", cpus, "sh",
               "-c", cmd});
  }
  ::setpgid(pid, pid);
  return HostJob(pid, out_path);
}

uint64_t TestHosts::rx_bytes(int i) const {
  std::string out;
  if (run(i, "ip -j -s link show eth0", &out) != 0)
    throw std::runtime_error("test hosts: ip -s link on " + name(i) + ": " + out);
  auto j = nlohmann::json::parse(out);
  return j.at(0).at("stats64").at("rx").at("bytes").get<uint64_t>();
}

void TestHosts::set_link(int i, bool up) const {
  on_switch("ip link set " + port_name(i) + (up ? " up" : " down"));
}

void TestHosts::emulate_link(int i, const WireFaults& faults) {
  std::unique_ptr<EmulatedWire>& wire = wires_.at(size_t(i));
  if (wire) {
    wire->set_faults(faults);
    return;
  }
  // Deleting the switch's end of the veth pair deletes host i's eth0 too;
  // the wire's two TAP devices take their names, then their places.
  on_switch("ip link del " + port_name(i));
  wire = std::make_unique<EmulatedWire>(hosts_.at(size_t(i)).pid, "eth0", switch_.pid, port_name(i),
                                        faults);
  plug_in(i);
}

WireStats TestHosts::wire_stats(int i) const {
  const auto& wire = wires_.at(size_t(i));
  return wire ? wire->stats() : WireStats{};
}

void TestHosts::name_hosts(const std::string& dir) const {
  const std::string path = dir + "/hosts";
  {
    std::ofstream etc(path);
    etc << "127.0.0.1 localhost\n";
    for (int i = 0; i < size(); ++i) etc << address(i) << " " << name(i) << "\n";
    if (!etc) throw std::runtime_error("test hosts: cannot write " + path);
  }
  for (int i = 0; i < size(); ++i) {
    std::string out;
    if (run(i, "mount --bind " + path + " /etc/hosts", &out) != 0)
      throw std::runtime_error("test hosts: bind-mounting /etc/hosts on " + name(i) + ": " + out);
  }
}

std::string TestHosts::write_launch_agent(const std::string& dir) const {
  const std::string path = dir + "/agent";
  {
    std::ofstream agent(path);
    agent << "#!/bin/sh\n# mpirun's launch agent: `agent HOST CMD...` runs CMD on test host HOST.\n"
          << "host=$1; shift\ncase $host in\n";
    for (int i = 0; i < size(); ++i)
      agent << "  " << name(i) << ") exec " << enter(i) << " sh -c \"$*\";;\n";
    agent << "esac\necho \"agent: unknown host $host\" >&2; exit 1\n";
    if (!agent) throw std::runtime_error("test hosts: cannot write " + path);
  }
  if (::chmod(path.c_str(), 0755) != 0)
    throw std::runtime_error("test hosts: cannot make " + path + " executable");
  return path;
}

TestHosts::~TestHosts() { teardown(); }

int TestHosts::kill_host(int i) const {
  const Holder& h = hosts_.at(size_t(i));
  int killed = 0;
  for (int tries = 0; tries < 100; ++tries) {  // forks racing the kill: at most ~2 s
    auto left = pids_in(h.netns, h.pid);
    if (left.empty()) break;
    for (pid_t p : left) killed += ::kill(p, SIGKILL) == 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return killed;
}

void TestHosts::teardown() {
  // Emulated wires stop first: their TAP devices go with their descriptors.
  wires_.clear();
  // The links first (deleting one end of a veth deletes both), then every
  // process in each namespace while its holder still pins it, then the
  // holders; with the last process of a namespace, the namespace and the
  // bridge in it go too.
  if (switch_.pid > 0)
    for (size_t i = 0; i < hosts_.size(); ++i)
      run_command("nsenter -t " + std::to_string(switch_.pid) + " -n -- ip link del " +
                  port_name(int(i)));
  std::vector<Holder> all = hosts_;
  all.push_back(switch_);
  for (const Holder& h : all) {
    if (h.pid <= 0) continue;
    for (int tries = 0; tries < 100; ++tries) {  // at most ~2 s per host
      auto left = pids_in(h.netns, h.pid);
      if (left.empty()) break;
      for (pid_t p : left) ::kill(p, SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ::kill(h.pid, SIGKILL);
    ::waitpid(h.pid, nullptr, 0);
  }
  hosts_.clear();
  switch_ = Holder{};
}

bool test_hosts_required() { return env_flag("BRAID_TEST_HOSTS_REQUIRED"); }

}  // namespace braid::testing
