// Runs a test body in N real processes (fork), each a rank of one job that
// meets through a fresh FileStore. Failures in any rank fail the test with
// that rank's message. A hung rank is killed after `timeout`.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "braid/store.h"

namespace braid {
class Communicator;
}

namespace braid::testing {

struct RankResult {
  int rank = 0;
  int exit_code = 0;     // 0 = passed
  int signal = 0;        // non-zero when killed by a signal
  std::string output;    // what the rank wrote to its failure pipe
};

// Forks `n` processes; each calls body(rank, n, store). An exception or a
// failed gtest assertion (ADD_FAILURE etc.) in a rank marks it failed.
// `env` entries ("K=V") are set in every child before body runs.
std::vector<RankResult> run_ranks(int n,
                                  const std::function<void(int, int, std::shared_ptr<Store>)>& body,
                                  std::chrono::seconds timeout = std::chrono::seconds(120),
                                  const std::vector<std::string>& env = {});

// run_ranks + EXPECT that every rank passed (prints each failing rank).
void expect_all_pass(int n, const std::function<void(int, int, std::shared_ptr<Store>)>& body,
                     std::chrono::seconds timeout = std::chrono::seconds(120),
                     const std::vector<std::string>& env = {});

// Rank `rank` of a run_ranks job as a communicator: every operation with a
// deadline of `timeout_s`, over `transport` ("" = BRAID_TRANSPORT or auto).
std::shared_ptr<Communicator> make_comm(int rank, int size, std::shared_ptr<Store> store,
                                        int timeout_s = 30, const std::string& transport = "");

// A fresh temporary directory under /tmp, removed with its contents when
// the process that made it exits normally (not by forked ranks).
std::string temp_dir(const std::string& tag);

}  // namespace braid::testing
