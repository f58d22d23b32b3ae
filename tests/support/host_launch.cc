#include "support/host_launch.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <thread>

#include "support/tool.h"

namespace braid::testing {

std::string HostLaunch::all() const {
  std::string s;
  for (size_t i = 0; i < out.size(); ++i)
    s += "--- node " + std::to_string(i) + " (status " + std::to_string(status[i]) + ")\n" + out[i];
  return s;
}

std::vector<HostJob> start_on_hosts(const TestHosts& hosts, int per_host, const std::string& program,
                                    const std::string& dir, int timeout_s, const std::string& env,
                                    const std::string& flags) {
  const std::string secret = "multihost-test-" + std::to_string(::getpid());
  std::vector<HostJob> jobs;
  for (int r = 0; r < hosts.size(); ++r) {
    const std::string cmd = "export BRAID_SECRET=" + secret + " BRAID_PROBE=0 BRAID_TIMEOUT=" +
                            std::to_string(timeout_s) + (env.empty() ? "" : " " + env) +
                            "; exec " + braid_bin() + " run -n " + std::to_string(per_host) +
                            " --nnodes " + std::to_string(hosts.size()) + " --node-rank " +
                            std::to_string(r) + " --master " + hosts.address(0) + ":" +
                            std::to_string(kHostLaunchPort) + (flags.empty() ? "" : " " + flags) +
                            " -- " + program;
    jobs.push_back(hosts.start(r, cmd, dir + "/node" + std::to_string(r) + ".out"));
  }
  return jobs;
}

HostLaunch launch_on_hosts(const TestHosts& hosts, int per_host, const std::string& program,
                           const std::string& dir, std::chrono::seconds limit, const std::string& env,
                           const std::string& flags) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<HostJob> jobs = start_on_hosts(hosts, per_host, program, dir, 60, env, flags);
  HostLaunch l;
  for (auto& j : jobs) l.status.push_back(j.wait(t0 + limit));
  for (auto& j : jobs) l.out.push_back(j.output());
  l.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return l;
}

size_t wait_for_lines(const std::string& path, size_t n, std::chrono::seconds limit) {
  const auto t0 = std::chrono::steady_clock::now();
  size_t lines = 0;
  while (std::chrono::steady_clock::now() - t0 < limit) {
    std::ifstream log(path);  // whole lines only: one may be half written
    lines = size_t(std::count(std::istreambuf_iterator<char>(log), {}, '\n'));
    if (lines >= n) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return lines;
}

}  // namespace braid::testing
