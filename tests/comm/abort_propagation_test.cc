// A rank whose communicator fails in the middle of an all_reduce marks the
// shared memory its peers wait on (abort_mark.h): the shm wire's segment,
// and the chain all-reduce's ring. Its peers must then fail long before
// their own deadline, with a message naming the failing rank and carrying
// its error. Real processes over shared memory.
//
// The failure: rank 0 stops itself (SIGSTOP) mid-call, so rank 2, whose
// deadline alone is short, times out while rank 1 is left waiting on
// counters in shared memory. Neither rank 0 nor rank 2 exits meanwhile, so
// rank 1 can learn of the failure only from the mark (or, for a wait on
// messages, from the first-failure record in the store). Once ranks 1 and
// 2 have failed, rank 2 resumes rank 0, which must fail with the same news.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <string>
#include <thread>

#include "braid/comm.h"
#include "braid/env.h"
#include "support/multiproc.h"

using namespace braid;
using braid::testing::make_comm;
using braid::testing::run_ranks;

namespace {

constexpr int kPeerDeadlineS = 60;

Bytes bytes_of(const std::string& s) { return Bytes(s.begin(), s.end()); }

void expect_failure_reaches_peers(const std::string& algorithm) {
  auto res = run_ranks(3, [algorithm](int rank, int size, std::shared_ptr<Store> store) {
    auto c = make_comm(rank, size, store, rank == 2 ? 2 : kPeerDeadlineS, "shm");
    c->set_algorithm("all_reduce", algorithm);
    std::vector<float> v(size_t(8) << 20, 1.0f);  // 32 MiB: many chunks per call
    c->all_reduce(v.data(), v.data(), v.size(), DType::kF32, ReduceOp::kSum);
    EXPECT_EQ(c->last_algorithm(), algorithm);
    if (rank == 0) {
      store->set("test/pid/0", bytes_of(std::to_string(::getpid())));
      std::thread([] {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        ::kill(::getpid(), SIGSTOP);
      }).detach();
    }
    const double t0 = now_s();
    std::string what;
    try {
      for (int i = 0; i < 100000; ++i)
        c->all_reduce(v.data(), v.data(), v.size(), DType::kF32, ReduceOp::kMax);
      ADD_FAILURE() << "rank " << rank << ": 100000 all_reduces completed";
      return;
    } catch (const Error& e) {
      what = e.what();
      if (rank == 2) {
        EXPECT_EQ(e.code(), Errc::kTimeout) << what;
      }
    }
    const double took = now_s() - t0;
    store->set("test/failed/" + std::to_string(rank), {1});
    if (rank == 2) {
      // Rank 1 has failed while rank 0 was stopped; now rank 0's turn.
      // Alive until both have, so that neither learns of it by an exit.
      store->wait({"test/failed/1", "test/pid/0"}, std::chrono::seconds(2 * kPeerDeadlineS));
      const Bytes pid = store->get("test/pid/0");
      ::kill(pid_t(std::stoi(std::string(pid.begin(), pid.end()))), SIGCONT);
      store->wait({"test/failed/0"}, std::chrono::seconds(2 * kPeerDeadlineS));
      return;
    }
    // Well inside kPeerDeadlineS: rank 1 learnt of rank 2's failure, not of
    // its own deadline (rank 0's clock ran on while it was stopped).
    if (rank == 1) {
      EXPECT_LT(took, kPeerDeadlineS / 3.0) << what;
    }
    EXPECT_NE(what.find("rank 2"), std::string::npos) << what;
    EXPECT_NE(what.find("timed out"), std::string::npos)
        << "rank 2's own error must reach rank " << rank << ": " << what;
  }, std::chrono::seconds(3 * kPeerDeadlineS));
  for (const auto& r : res) EXPECT_EQ(r.exit_code, 0) << "rank " << r.rank << ": " << r.output;
}

}  // namespace

TEST(AbortPropagation, ShmWireFailureMidCallReachesPeersNamingTheRank) {
  expect_failure_reaches_peers("ring");
}

TEST(AbortPropagation, ChainFailureMidCallReachesPeersNamingTheRank) {
  expect_failure_reaches_peers("chain");
}
