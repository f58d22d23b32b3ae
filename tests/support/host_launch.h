// One `braid run --nnodes H --node-rank R --master 198.18.0.1:PORT`
// launcher per test host (test_hosts.h), all started at once, each running
// `program` on its `per_host` ranks, as a user starts a multi-node job by
// hand. The ranks get BRAID_SECRET, BRAID_PROBE=0 (a test leaves the
// machine's tuning cache alone) and BRAID_TIMEOUT, then `env` (more
// "NAME=value" words for `export`, "" for none); `flags` go to every
// launcher (e.g. "--max-restarts 1").
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "support/test_hosts.h"

namespace braid::testing {

constexpr int kHostLaunchPort = 29500;  // on 198.18.0.1, inside host 0's own network

struct HostLaunch {
  std::vector<int> status;       // per node: exit status, -1 when killed at the deadline
  std::vector<std::string> out;  // per node: the launcher's output (ranks' lines prefixed)
  double seconds = 0;
  // Every node's output under a "--- node I (status S)" line.
  std::string all() const;
};

// Starts the launchers and returns at once; output to DIR/nodeI.out.
std::vector<HostJob> start_on_hosts(const TestHosts& hosts, int per_host, const std::string& program,
                                    const std::string& dir, int timeout_s = 60,
                                    const std::string& env = "", const std::string& flags = "");
// Starts them and waits for every one to end (or kills it) within `limit`.
HostLaunch launch_on_hosts(const TestHosts& hosts, int per_host, const std::string& program,
                           const std::string& dir, std::chrono::seconds limit,
                           const std::string& env = "", const std::string& flags = "");

// Waits until the file at `path` has at least `n` whole lines (a job's
// JSON log), or `limit` passes; returns how many it has.
size_t wait_for_lines(const std::string& path, size_t n, std::chrono::seconds limit);

}  // namespace braid::testing
