// Faults, bad input, sub-communicators, async work, deterministic mode and
// the TCP transport — all with real processes.
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>

#include "braid/comm.h"
#include "braid/env.h"
#include "braid/reduce.h"
#include "support/multiproc.h"

using namespace braid;
using braid::testing::expect_all_pass;
using braid::testing::make_comm;
using braid::testing::run_ranks;

namespace {

template <class F>
Error expect_error(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected braid::Error";
  return Error(Errc::kInternal, "none");
}

bool contains(const std::string& s, const std::string& sub) {
  return s.find(sub) != std::string::npos;
}

// An f32 sum all_reduce of v's first `count` elements, where the ranks
// disagree on the count: must fail with kMismatch naming both counts.
void expect_count_mismatch(Communicator& c, std::vector<float>& v, size_t count, size_t a, size_t b) {
  auto e = expect_error([&] { c.all_reduce(v.data(), v.data(), count, DType::kF32, ReduceOp::kSum); });
  EXPECT_EQ(e.code(), Errc::kMismatch) << e.what();
  EXPECT_TRUE(contains(e.what(), "count " + std::to_string(a)) &&
              contains(e.what(), "count " + std::to_string(b)))
      << e.what();
}

}  // namespace

TEST(CommFaults, BadArgumentsAreClearErrors) {
  expect_all_pass(2, [](int rank, int size, std::shared_ptr<Store> store) {
    auto c = make_comm(rank, size, store);
    std::vector<float> v(10);
    auto e = expect_error([&] { c->all_reduce(nullptr, v.data(), 10, DType::kF32, ReduceOp::kSum); });
    EXPECT_EQ(e.code(), Errc::kInvalidArgument);
    EXPECT_TRUE(contains(e.what(), "null")) << e.what();
    e = expect_error([&] { c->broadcast(v.data(), 10, DType::kF32, 2); });
    EXPECT_TRUE(contains(e.what(), "root 2 is out of range")) << e.what();
    e = expect_error([&] { c->all_reduce(v.data(), v.data(), 10, DType::kF32, ReduceOp::kBxor); });
    EXPECT_TRUE(contains(e.what(), "bxor")) << e.what();
    e = expect_error([&] { c->all_gather(v.data(), v.data(), size_t(1) << 62, DType::kF64); });
    EXPECT_TRUE(contains(e.what(), "overflows")) << e.what();
    e = expect_error([&] { c->send(v.data(), 1, DType::kF32, rank, 0); });
    EXPECT_TRUE(contains(e.what(), "is this rank")) << e.what();
    e = expect_error([&] { c->set_algorithm("all_reduce", "bogus"); });
    EXPECT_TRUE(contains(e.what(), "bogus")) << e.what();
    // bad input does not break the communicator
    c->all_reduce(v.data(), v.data(), 10, DType::kF32, ReduceOp::kSum);
  });
}

TEST(CommFaults, MismatchedCountsNameBothSides) {
  expect_all_pass(2, [](int rank, int size, std::shared_ptr<Store> store) {
    auto c = make_comm(rank, size, store, 20);
    std::vector<float> v(100, 1.0f);
    expect_count_mismatch(*c, v, rank == 0 ? 100 : 50, 100, 50);
  });
}

TEST(CommFaults, MismatchedSmallAndLargeMessagesNameBothSides) {
  // Small messages travel through shared-memory fast boxes, large ones
  // through the slot ring; a mismatch across the two must still be named.
  expect_all_pass(2, [](int rank, int size, std::shared_ptr<Store> store) {
    auto c = make_comm(rank, size, store, 20);
    c->set_algorithm("all_reduce", "rd");
    std::vector<float> v(5000, 1.0f);  // 20 000 bytes: past the 4 KiB fast box
    expect_count_mismatch(*c, v, rank == 0 ? 4 : 5000, 4, 5000);
  });
}

TEST(CommFaults, MismatchedCollectivesNameBothSides) {
  expect_all_pass(2, [](int rank, int size, std::shared_ptr<Store> store) {
    auto c = make_comm(rank, size, store, 20);
    std::vector<float> v(64, 1.0f), out(128);
    auto e = expect_error([&] {
      if (rank == 0) c->all_reduce(v.data(), v.data(), 64, DType::kF32, ReduceOp::kSum);
      else c->all_gather(v.data(), out.data(), 64, DType::kF32);
    });
    EXPECT_EQ(e.code(), Errc::kMismatch) << e.what();
    EXPECT_TRUE(contains(e.what(), "all_reduce") && contains(e.what(), "all_gather")) << e.what();
  });
}

TEST(CommFaults, TimeoutNamesRankOpSequenceAndPeer) {
  auto res = run_ranks(2, [](int rank, int size, std::shared_ptr<Store> store) {
    auto c = make_comm(rank, size, store, 2);
    std::vector<float> v(1000, 1.0f);
    c->all_reduce(v.data(), v.data(), 1000, DType::kF32, ReduceOp::kSum);
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::seconds(5));  // never joins the second call
      return;
    }
    double t0 = now_s();
    auto e = expect_error([&] { c->all_reduce(v.data(), v.data(), 1000, DType::kF32, ReduceOp::kSum); });
    double took = now_s() - t0;
    EXPECT_EQ(e.code(), Errc::kTimeout) << e.what();
    // The 2 s deadline, neither early nor much late.
    EXPECT_GE(took, 1.9) << e.what();
    EXPECT_LT(took, 4.5);
    std::string m = e.what();
    EXPECT_TRUE(contains(m, "rank 0") && contains(m, "all_reduce seq 2") && contains(m, "rank 1") &&
                contains(m, "bytes"))
        << m;
    // the communicator stays failed, and says why
    auto e2 = expect_error([&] { c->barrier(); });
    EXPECT_TRUE(contains(e2.what(), "failed earlier")) << e2.what();
    EXPECT_TRUE(contains(c->flight_record(), "all_reduce")) << c->flight_record();
  }, std::chrono::seconds(60));
  EXPECT_EQ(res[0].exit_code, 0) << res[0].output;
}

TEST(CommFaults, PeerDeathFailsPendingOperationQuickly) {
  for (const char* transport : {"shm", "tcp"}) {
    auto res = run_ranks(3, [transport](int rank, int size, std::shared_ptr<Store> store) {
      auto c = make_comm(rank, size, store, 60, transport);
      std::vector<float> v(1 << 16, 1.0f);
      c->all_reduce(v.data(), v.data(), v.size(), DType::kF32, ReduceOp::kSum);
      if (rank == 2) ::_exit(0);  // dies without a word
      double t0 = now_s();
      auto e = expect_error([&] { c->all_reduce(v.data(), v.data(), v.size(), DType::kF32, ReduceOp::kSum); });
      EXPECT_LT(now_s() - t0, 10.0) << transport;
      EXPECT_TRUE(e.code() == Errc::kPeerDied || e.code() == Errc::kTimeout) << e.what();
      // Every survivor names the dead rank, whether it saw the death itself
      // or heard of it from the other survivor; and itself and the call.
      const std::string m = e.what();
      EXPECT_TRUE(contains(m, "peer rank 2 (pid ")) << transport << ": " << m;
      EXPECT_TRUE(contains(m, "rank " + std::to_string(rank) + ": all_reduce seq 2"))
          << transport << ": " << m;
    }, std::chrono::seconds(90));
    EXPECT_EQ(res[0].exit_code, 0) << transport << ": " << res[0].output;
    EXPECT_EQ(res[1].exit_code, 0) << transport << ": " << res[1].output;
  }
}

// Once every rank has set up, no shared-memory name is left in /dev/shm:
// each segment stays mapped but its name is gone, so a rank killed later
// (SIGKILL runs no destructor) leaves nothing behind. Mapped, a removed
// name reads "(deleted)" in /proc/self/maps.
TEST(CommFaults, SharedMemoryNamesAreGoneOnceSetUpEnds) {
  auto res = run_ranks(3, [](int rank, int size, std::shared_ptr<Store> store) {
    auto c = make_comm(rank, size, store, 60, "shm");
    std::vector<float> v(1 << 12, 1.0f);
    c->all_reduce(v.data(), v.data(), v.size(), DType::kF32, ReduceOp::kSum);
    std::ifstream maps("/proc/self/maps");
    int mapped = 0;
    for (std::string line; std::getline(maps, line);) {
      if (line.find("/dev/shm/braid.") == std::string::npos) continue;
      ++mapped;
      EXPECT_NE(line.find("(deleted)"), std::string::npos) << "rank " << rank << ": " << line;
    }
    EXPECT_GE(mapped, 3) << "rank " << rank << ": its own segment and both peers'";
  }, std::chrono::seconds(60));
  EXPECT_EQ(res[0].exit_code, 0) << res[0].output;
}

// In a sub-communicator, errors name ranks by their place in it and, where
// that differs, in the world: "rank 1 (world rank 2, pid …)".
TEST(CommFaults, SubCommunicatorErrorsNameWorldRanks) {
  auto res = run_ranks(4, [](int rank, int size, std::shared_ptr<Store> store) {
    auto world = make_comm(rank, size, store, 60);
    auto sub = world->split(rank % 2, rank);  // {0, 2} and {1, 3}
    std::vector<float> v(1 << 12, 1.0f);
    sub->all_reduce(v.data(), v.data(), v.size(), DType::kF32, ReduceOp::kSum);
    if (rank == 2) ::_exit(0);
    if (rank != 0) return;
    auto e = expect_error([&] { sub->all_reduce(v.data(), v.data(), v.size(), DType::kF32, ReduceOp::kSum); });
    EXPECT_TRUE(contains(e.what(), "peer rank 1 (world rank 2, pid ")) << e.what();
  }, std::chrono::seconds(60));
  EXPECT_EQ(res[0].exit_code, 0) << res[0].output;
  auto res2 = run_ranks(2, [](int rank, int size, std::shared_ptr<Store> store) {
    auto world = make_comm(rank, size, store, 60);
    auto sub = world->split(0, -rank);  // reversed: world rank 1 is rank 0 here
    std::vector<int32_t> v(100, 1);
    auto e = expect_error([&] {
      sub->all_reduce(v.data(), v.data(), rank == 0 ? 100 : 99, DType::kI32, ReduceOp::kSum);
    });
    const std::string me = rank == 0 ? "rank 1 (world rank 0)" : "rank 0 (world rank 1)";
    EXPECT_TRUE(contains(e.what(), me)) << e.what();
  }, std::chrono::seconds(60));
  for (auto& r : res2) EXPECT_EQ(r.exit_code, 0) << r.output;
}

// The chain all-reduce waits on counters in shared memory, not on messages:
// a mismatch, a dead peer or a timeout must still reach every rank quickly.
TEST(CommChain, MismatchFailsEveryRankNamingBothSides) {
  expect_all_pass(3, [](int rank, int size, std::shared_ptr<Store> store) {
    auto c = make_comm(rank, size, store, 30);
    c->set_algorithm("all_reduce", "chain");
    std::vector<float> v(300000, 1.0f);
    c->all_reduce(v.data(), v.data(), v.size(), DType::kF32, ReduceOp::kSum);
    EXPECT_EQ(c->last_algorithm(), "chain");
    EXPECT_EQ(v[12345], 3.0f);
    double t0 = now_s();
    expect_count_mismatch(*c, v, rank == 0 ? 300000 : 200000, 300000, 200000);
    EXPECT_LT(now_s() - t0, 10.0);
  });
}

// Two one-page slots: every chunk waits for a slot freed two chunks
// before, across calls too (the ring's position carries over).
TEST(CommChain, TwoTinySlotsMatchTheSerialSum) {
  expect_all_pass(3, [](int rank, int size, std::shared_ptr<Store> store) {
    auto c = make_comm(rank, size, store, 30);
    c->set_algorithm("all_reduce", "chain");
    for (size_t count : {size_t(0), size_t(1), size_t(1023), size_t(1024), size_t(1025), size_t(100003)}) {
      std::vector<float> f(count), fo(count, -1.0f);
      std::vector<int64_t> q(count);
      std::vector<double> d(count);
      for (size_t i = 0; i < count; ++i) {
        f[i] = float(int(i % 7) + rank);
        q[i] = int64_t(i % 11) * (rank + 1);
        d[i] = double(i % 5) + 3.0 * rank;
      }
      c->all_reduce(f.data(), fo.data(), count, DType::kF32, ReduceOp::kSum);
      c->all_reduce(q.data(), q.data(), count, DType::kI64, ReduceOp::kMax);
      c->all_reduce(d.data(), d.data(), count, DType::kF64, ReduceOp::kAvg);
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(fo[i], float(3 * int(i % 7) + 3)) << "f32 sum, count " << count << ", element " << i;
        ASSERT_EQ(q[i], int64_t(i % 11) * size) << "i64 max, count " << count << ", element " << i;
        ASSERT_EQ(d[i], double(i % 5) + 3.0) << "f64 avg, count " << count << ", element " << i;
      }
      EXPECT_EQ(c->last_algorithm(), "chain");
    }
  }, std::chrono::seconds(120), {"BRAID_CHAIN_SLOT_BYTES=4096", "BRAID_CHAIN_SLOTS=2"});
}

TEST(CommChain, PeerKilledMidCallFailsTheOthersQuickly) {
  auto res = run_ranks(3, [](int rank, int size, std::shared_ptr<Store> store) {
    auto c = make_comm(rank, size, store, 60);
    c->set_algorithm("all_reduce", "chain");
    std::vector<float> v(size_t(8) << 20, 1.0f);  // 32 MiB: many chunks per call
    c->all_reduce(v.data(), v.data(), v.size(), DType::kF32, ReduceOp::kSum);
    if (rank == 2)
      std::thread([] {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        ::kill(::getpid(), SIGKILL);
      }).detach();
    double t0 = now_s();
    auto e = expect_error([&] {
      for (int i = 0; i < 100000; ++i)
        c->all_reduce(v.data(), v.data(), v.size(), DType::kF32, ReduceOp::kMax);
    });
    EXPECT_LT(now_s() - t0, 10.0);
    EXPECT_EQ(e.code(), Errc::kPeerDied) << e.what();
    EXPECT_TRUE(contains(e.what(), "rank 2")) << e.what();
  }, std::chrono::seconds(90));
  EXPECT_EQ(res[0].exit_code, 0) << res[0].output;
  EXPECT_EQ(res[1].exit_code, 0) << res[1].output;
}

TEST(CommChain, TimeoutReachesEveryWaitingRank) {
  auto res = run_ranks(3, [](int rank, int size, std::shared_ptr<Store> store) {
    auto c = make_comm(rank, size, store, 2);
    c->set_algorithm("all_reduce", "chain");
    std::vector<float> v(1 << 20, 1.0f);
    c->all_reduce(v.data(), v.data(), v.size(), DType::kF32, ReduceOp::kSum);
    if (rank == 2) {
      std::this_thread::sleep_for(std::chrono::seconds(6));  // never joins the second call
      return;
    }
    double t0 = now_s();
    auto e = expect_error([&] { c->all_reduce(v.data(), v.data(), v.size(), DType::kF32, ReduceOp::kSum); });
    EXPECT_GE(now_s() - t0, 1.9) << e.what();  // the 2 s deadline, not earlier
    EXPECT_LT(now_s() - t0, 5.0);
    EXPECT_EQ(e.code(), Errc::kTimeout) << e.what();
    EXPECT_TRUE(contains(e.what(), "all_reduce seq 2") && contains(e.what(), "rank 2")) << e.what();
  }, std::chrono::seconds(60));
  EXPECT_EQ(res[0].exit_code, 0) << res[0].output;
  EXPECT_EQ(res[1].exit_code, 0) << res[1].output;
}

TEST(CommSplit, SubCommunicatorsRunConcurrentlyWithEachOtherAndParent) {
  expect_all_pass(4, [](int rank, int size, std::shared_ptr<Store> store) {
    auto world = make_comm(rank, size, store);
    auto sub = world->split(rank % 2, -rank);  // key reverses the order
    ASSERT_NE(sub, nullptr);
    EXPECT_EQ(sub->size(), 2);
    EXPECT_EQ(sub->rank(), rank < 2 ? 1 : 0);
    auto none = world->split(rank == 0 ? -1 : 0, rank);
    EXPECT_EQ(none == nullptr, rank == 0);
    // sub and world run at the same time from two threads
    std::vector<int64_t> a(100000), b(100000);
    std::thread t([&] {
      for (int it = 0; it < 20; ++it) {
        std::fill(a.begin(), a.end(), rank);
        sub->all_reduce(a.data(), a.data(), a.size(), DType::kI64, ReduceOp::kSum);
        ASSERT_EQ(a[7], rank % 2 == 0 ? 0 + 2 : 1 + 3);
      }
    });
    for (int it = 0; it < 20; ++it) {
      std::fill(b.begin(), b.end(), 1);
      world->all_reduce(b.data(), b.data(), b.size(), DType::kI64, ReduceOp::kSum);
      ASSERT_EQ(b[99], 4);
    }
    t.join();
  });
}

TEST(CommAsync, ManyOutstandingOperationsCompleteInOrder) {
  expect_all_pass(3, [](int rank, int size, std::shared_ptr<Store> store) {
    auto c = make_comm(rank, size, store);
    const int k = 16;
    std::vector<std::vector<float>> bufs(k, std::vector<float>(50000));
    std::vector<Work> works;
    for (int i = 0; i < k; ++i) {
      std::fill(bufs[i].begin(), bufs[i].end(), float(rank + i));
      works.push_back(c->all_reduce_async(bufs[i].data(), bufs[i].data(), bufs[i].size(),
                                          DType::kF32, ReduceOp::kSum));
    }
    // a blocking call issued meanwhile waits its turn
    float x = 1;
    c->all_reduce(&x, &x, 1, DType::kF32, ReduceOp::kSum);
    EXPECT_EQ(x, 3.0f);
    for (int i = 0; i < k; ++i) {
      works[i].wait();
      EXPECT_TRUE(works[i].test());
      EXPECT_EQ(bufs[i][123], float(0 + 1 + 2 + 3 * i));
    }
  });
}

TEST(CommAsync, AsyncInlineRunsCollectivesHereAndKeepsTheirErrorsInTheWork) {
  auto res = run_ranks(2, [](int rank, int size, std::shared_ptr<Store> store) {
    auto c = make_comm(rank, size, store, 2);
    // Queued work ahead of the switch still comes first.
    std::vector<float> a(50000, float(rank + 1));
    Work queued = c->all_reduce_async(a.data(), a.data(), a.size(), DType::kF32, ReduceOp::kSum);
    c->set_async_inline(true);
    std::vector<float> b(50000, float(10 * (rank + 1)));
    Work w = c->all_reduce_async(b.data(), b.data(), b.size(), DType::kF32, ReduceOp::kSum);
    // Finished when the call returns, the queued one before it.
    if (!w.test() || !queued.test() || a[7] != 3.0f || b[7] != 30.0f) std::_Exit(10);
    // Send and receive stay asynchronous: rank 0's receive is posted
    // before rank 1 sends (after a barrier that follows it).
    float got = 0, sent = 5;
    Work r;
    if (rank == 0) r = c->recv_async(&got, 1, DType::kF32, 1);
    c->barrier();
    if (rank == 1) c->send(&sent, 1, DType::kF32, 0);
    if (rank == 0) {
      r.wait();
      if (got != 5.0f) std::_Exit(11);
    }
    c->barrier();
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::seconds(5));  // never joins the next call
      return;
    }
    // A failure is the Work's: the call returns it, wait() throws it.
    Work failed;
    try {
      failed = c->all_reduce_async(b.data(), b.data(), b.size(), DType::kF32, ReduceOp::kSum);
    } catch (const Error& e) {
      std::fprintf(stderr, "the call threw: %s\n", e.what());
      std::_Exit(12);
    }
    auto e = expect_error([&] { failed.wait(); });
    if (e.code() != Errc::kTimeout || !contains(e.what(), "all_reduce")) {
      std::fprintf(stderr, "%s\n", e.what());
      std::_Exit(13);
    }
  }, std::chrono::seconds(60));
  EXPECT_EQ(res[0].exit_code, 0) << res[0].output;
  EXPECT_EQ(res[1].exit_code, 0) << res[1].output;
}

TEST(CommDeterministic, BitwiseIdenticalAcrossAlgorithmsAndSizes) {
  expect_all_pass(5, [](int rank, int size, std::shared_ptr<Store> store) {
    auto c = make_comm(rank, size, store);
    std::mt19937 rng(1234 + rank);
    std::uniform_real_distribution<float> dist(-1, 1);
    const size_t n = 300007;
    std::vector<float> in(n);
    for (auto& v : in) v = dist(rng) * 1000.0f;
    // every rank knows every rank's input (same generator)
    std::vector<std::vector<float>> all(size, std::vector<float>(n));
    for (int r = 0; r < size; ++r) {
      std::mt19937 g(1234 + r);
      for (auto& v : all[r]) v = dist(g) * 1000.0f;
    }
    std::vector<float> want(n);
    for (size_t i = 0; i < n; ++i) {
      float acc = all[0][i];
      for (int r = 1; r < size; ++r) acc += all[r][i];
      want[i] = acc;
    }
    for (const char* algo : {"ring", "hd", "rd", "direct", "oneshot", "auto"}) {
      for (size_t count : {n, size_t(1001), size_t(3)}) {
        c->set_algorithm("all_reduce", algo);
        std::vector<float> out(count);
        c->all_reduce(in.data(), out.data(), count, DType::kF32, ReduceOp::kSum);
        EXPECT_EQ(0, std::memcmp(out.data(), want.data(), count * 4))
            << "algorithm " << algo << " count " << count;
      }
    }
  }, std::chrono::seconds(120), {"BRAID_DETERMINISTIC=1", "BRAID_CHUNK_BYTES=4096"});
}

// The TCP matrix: every all_reduce algorithm, all_gather, and (for
// messages of 256 KiB and up, which several connections per pair stripe)
// odd byte counts through all_to_all, broadcast and send/recv.
namespace {

void tcp_matrix(int rank, int size, std::shared_ptr<Store> store) {
  auto c = make_comm(rank, size, store, 30, "tcp");
  EXPECT_EQ(c->transport_to((rank + 1) % size), "tcp");
  // ("chain" needs shared memory: forced over TCP it is an error, registry_test.)
  for (const char* algo : {"ring", "hd", "rd", "direct", "oneshot"}) {
    c->set_algorithm("all_reduce", algo);
    for (size_t count : {size_t(0), size_t(7), size_t(1 << 20) + 3}) {
      std::vector<int32_t> v(count);
      for (size_t i = 0; i < count; ++i) v[i] = int32_t(i % 100) + rank;
      c->all_reduce(v.data(), v.data(), count, DType::kI32, ReduceOp::kSum);
      for (size_t i = 0; i < count; i += 997)
        ASSERT_EQ(v[i], 3 * int32_t(i % 100) + 3) << algo << " " << count;
    }
  }
  // The ring sends its own block from the input and asks for the copy into
  // the output on the way (Request::copy_to), which TCP does at post time.
  for (const char* algo : {"ring", "direct"}) {
    c->set_algorithm("all_gather", algo);
    std::vector<double> g(3 * 1000, -1.0), mine(1000, rank);
    c->all_gather(mine.data(), g.data(), 1000, DType::kF64);
    for (size_t i = 0; i < g.size(); ++i) ASSERT_EQ(g[i], double(i / 1000)) << algo << " element " << i;
  }
  for (size_t block : {size_t(1), size_t(300001), size_t(1 << 20) + 5}) {
    std::vector<uint8_t> in(block * size_t(size)), out(in.size(), 0);
    for (size_t i = 0; i < in.size(); ++i) in[i] = uint8_t(i * 7 + size_t(rank) * 31);
    c->all_to_all(in.data(), out.data(), block, DType::kU8);
    for (int j = 0; j < size; ++j)
      for (size_t i = 0; i < block; i += 101)
        ASSERT_EQ(out[size_t(j) * block + i], uint8_t((size_t(rank) * block + i) * 7 + size_t(j) * 31))
            << "all_to_all block " << block << " from rank " << j << " byte " << i;
    std::vector<uint8_t> b(block, 0);
    if (rank == 1)
      for (size_t i = 0; i < block; ++i) b[i] = uint8_t(i % 251);
    c->broadcast(b.data(), block, DType::kU8, 1);
    for (size_t i = 0; i < block; i += 97) ASSERT_EQ(b[i], uint8_t(i % 251)) << "broadcast " << block;
    std::vector<uint8_t> got(block, 0);
    Work s = c->send_async(in.data(), block, DType::kU8, (rank + 1) % size, 3);
    c->recv(got.data(), block, DType::kU8, (rank + size - 1) % size, 3);
    s.wait();
    const size_t from = size_t((rank + size - 1) % size);
    for (size_t i = 0; i < block; i += 89)
      ASSERT_EQ(got[i], uint8_t(i * 7 + from * 31)) << "send/recv " << block << " byte " << i;
  }
}

}  // namespace

TEST(CommTcp, CollectivesOverTcpMatchReference) { expect_all_pass(3, tcp_matrix); }

// Three connections per pair (BRAID_TCP_STREAMS): large messages in three
// stripes, small ones whole on the first connection, in any mix.
TEST(CommTcp, ThreeConnectionsPerPairMatchReference) {
  expect_all_pass(3, tcp_matrix, std::chrono::seconds(120), {"BRAID_TCP_STREAMS=3"});
}

// Ranks that disagree on the connection count fail at set-up, naming it.
TEST(CommTcp, ConnectionCountMismatchIsNamed) {
  auto res = run_ranks(2, [](int rank, int size, std::shared_ptr<Store> store) {
    ::setenv("BRAID_TCP_STREAMS", rank == 0 ? "1" : "2", 1);
    auto e = expect_error([&] { make_comm(rank, size, store, 4, "tcp"); });
    if (rank == 1) {
      EXPECT_EQ(e.code(), Errc::kMismatch) << e.what();
      EXPECT_TRUE(contains(e.what(), "BRAID_TCP_STREAMS")) << e.what();
      EXPECT_TRUE(contains(e.what(), "rank 1 opens 2 TCP connections") &&
                  contains(e.what(), "rank 0 (pid ") && contains(e.what(), "opens 1"))
          << e.what();
    } else {
      // Rank 0 waits for connections rank 1 never makes: it names itself,
      // the operation and the peer.
      EXPECT_EQ(e.code(), Errc::kTimeout) << e.what();
      EXPECT_TRUE(contains(e.what(), "rank 0: TCP set-up timed out") &&
                  contains(e.what(), "from rank 1 (pid "))
          << e.what();
    }
  });
  for (const auto& r : res) EXPECT_EQ(r.exit_code, 0) << "rank " << r.rank << ": " << r.output;
}

// Ranks on pretend hosts (BRAID_HOSTNAME): TCP between hosts, shared memory
// inside; hierarchical all-reduce and host-grouped ring order.
TEST(CommHierarchy, TwoPretendHostsInterleaved) {
  expect_all_pass(4, [](int rank, int size, std::shared_ptr<Store> store) {
    // ranks 0 and 2 on host "a", 1 and 3 on "b": the ring must reorder.
    ::setenv("BRAID_HOSTNAME", rank % 2 == 0 ? "a" : "b", 1);
    auto c = make_comm(rank, size, store);
    EXPECT_EQ(c->transport_to((rank + 2) % 4), "shm");
    EXPECT_EQ(c->transport_to((rank + 1) % 4), "tcp");
    for (const char* algo : {"hier", "ring", "hd"}) {
      c->set_algorithm("all_reduce", algo);
      for (size_t count : {size_t(0), size_t(1), size_t(1000), size_t(1 << 20) + 3}) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
          std::vector<float> v(count);
          for (size_t i = 0; i < count; ++i) v[i] = float(int(i % 13) + rank);
          c->all_reduce(v.data(), v.data(), count, DType::kF32, op);
          for (size_t i = 0; i < count; i += 101) {
            float base = float(int(i % 13));
            float want = op == ReduceOp::kSum ? 4 * base + 6
                         : op == ReduceOp::kAvg ? base + 1.5f : base + 3;
            ASSERT_EQ(v[i], want) << algo << " count " << count << " op " << reduce_op_name(op);
          }
        }
      }
    }
    EXPECT_TRUE(contains(c->flight_record(), "hier")) << c->flight_record();
    // ring-ordered reduce_scatter and all_gather keep each rank's own block
    std::vector<int32_t> in(4 * 777), out(777), g(4 * 777);
    for (size_t i = 0; i < in.size(); ++i) in[i] = int32_t(i) + rank;
    c->set_algorithm("reduce_scatter", "ring");
    c->reduce_scatter(in.data(), out.data(), 777, DType::kI32, ReduceOp::kSum);
    EXPECT_EQ(out[5], 4 * int32_t(rank * 777 + 5) + 6);
    c->set_algorithm("all_gather", "ring");
    c->all_gather(out.data(), g.data(), 777, DType::kI32);
    for (int j = 0; j < 4; ++j) EXPECT_EQ(g[size_t(j) * 777 + 5], 4 * int32_t(j * 777 + 5) + 6);
  }, std::chrono::seconds(120));
}

TEST(CommHierarchy, HostsWithDifferentTuningAndCoresStillAgreeOnAlgorithms) {
  // Host "b" has a tuning file that prices every link and reduction
  // differently from host "a"'s, and its ranks may use one core where "a"'s
  // use every core: cost models fed each host's own view pick different
  // algorithms, and the ranks then wait for messages their peers never send.
  const std::string dir = braid::testing::temp_dir("tuning");
  {
    std::ofstream(dir + "/a.json") << R"({"shm":{"alpha_us":0.2,"gbps":40},)"
                                      R"("tcp":{"alpha_us":2,"gbps":20},"reduce_gbps":50})";
    std::ofstream(dir + "/b.json") << R"({"shm":{"alpha_us":50,"gbps":0.5},)"
                                      R"("tcp":{"alpha_us":5000,"gbps":0.05},"reduce_gbps":0.5})";
  }
  expect_all_pass(4, [dir](int rank, int size, std::shared_ptr<Store> store) {
    const bool b = rank % 2 == 1;
    ::setenv("BRAID_HOSTNAME", b ? "b" : "a", 1);
    ::setenv("BRAID_TUNING", (dir + (b ? "/b.json" : "/a.json")).c_str(), 1);
    if (b) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(0, &one);
      ASSERT_EQ(::sched_setaffinity(0, sizeof one, &one), 0);
    }
    auto c = make_comm(rank, size, store);
    // Every rank's choice, as a number, gathered to compare.
    auto agree = [&](const std::string& what) {
      std::string algo = c->last_algorithm();
      int32_t mine = int32_t(std::hash<std::string>{}(algo) & 0x7fffffff);
      std::vector<int32_t> all(size_t(size), 0);
      c->all_gather(&mine, all.data(), 1, DType::kI32);
      for (int r = 0; r < size; ++r) EXPECT_EQ(all[size_t(r)], mine) << what << ": rank " << rank
                                                                        << " ran " << algo;
    };
    for (size_t count : {size_t(2), size_t(256), size_t(16) << 10, size_t(256) << 10,
                         size_t(1) << 20}) {
      std::vector<float> in(count * size_t(size)), out(count * size_t(size));
      for (size_t i = 0; i < in.size(); ++i) in[i] = float(int(i % 7) + rank);
      const std::string at = " of " + std::to_string(count) + " floats";
      c->all_reduce(in.data(), out.data(), count, DType::kF32, ReduceOp::kSum);
      ASSERT_EQ(out[1], float(4 * 1 + 6)) << "all_reduce" << at;
      agree("all_reduce" + at);
      c->reduce(in.data(), out.data(), count, DType::kF32, ReduceOp::kSum, 2);
      if (rank == 2) {
        ASSERT_EQ(out[1], float(4 * 1 + 6)) << "reduce" << at;
      }
      agree("reduce" + at);
      std::vector<float> v(count, float(rank == 1 ? 3 : 0));
      c->broadcast(v.data(), count, DType::kF32, 1);
      ASSERT_EQ(v[count - 1], 3.0f) << "broadcast" << at;
      agree("broadcast" + at);
      c->all_gather(in.data(), out.data(), count, DType::kF32);
      ASSERT_EQ(out[3 * count], float(3)) << "all_gather" << at;
      agree("all_gather" + at);
      c->reduce_scatter(in.data(), out.data(), count, DType::kF32, ReduceOp::kSum);
      ASSERT_EQ(out[0], float(4 * int((size_t(rank) * count) % 7) + 6)) << "reduce_scatter" << at;
      agree("reduce_scatter" + at);
    }
  }, std::chrono::seconds(120));
}

TEST(CommFlightRecorder, Sigusr1DumpsRecentOperations) {
  std::string path = braid::testing::temp_dir("fr") + "/stderr.txt";
  expect_all_pass(2, [path](int rank, int size, std::shared_ptr<Store> store) {
    auto c = make_comm(rank, size, store);
    install_flight_recorder_signal();
    std::vector<float> v(1000, 1.0f);
    c->all_reduce(v.data(), v.data(), v.size(), DType::kF32, ReduceOp::kSum);
    c->broadcast(v.data(), v.size(), DType::kF32, 1);
    if (rank != 0) return;
    FILE* f = std::freopen(path.c_str(), "w", stderr);
    ASSERT_NE(f, nullptr);
    ::raise(SIGUSR1);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::fflush(stderr);
    std::ifstream in(path);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_TRUE(contains(text, "flight recorder of rank 0") && contains(text, "all_reduce") &&
                contains(text, "broadcast") && contains(text, "done"))
        << text;
  });
}

TEST(CommP2P, ManySmallMessagesToASlowReceiverAllArrive) {
  // Fills the shared-memory fast boxes while the receiver is asleep; the
  // sender must be woken when boxes free up, not stall on its sleep slice.
  expect_all_pass(2, [](int rank, int size, std::shared_ptr<Store> store) {
    auto c = make_comm(rank, size, store);
    const int n = 300;
    if (rank == 0) {
      std::vector<int64_t> v(n);
      std::vector<Work> ws;
      for (int i = 0; i < n; ++i) {
        v[i] = 1000 + i;
        ws.push_back(c->send_async(&v[i], 1, DType::kI64, 1, uint32_t(i)));
      }
      double t0 = now_s();
      for (auto& w : ws) w.wait();
      EXPECT_LT(now_s() - t0, 5.0);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      double t0 = now_s();
      for (int i = 0; i < n; ++i) {
        int64_t x = -1;
        c->recv(&x, 1, DType::kI64, 0, uint32_t(i));
        ASSERT_EQ(x, 1000 + i);
      }
      EXPECT_LT(now_s() - t0, 2.0);
    }
    c->barrier();
  });
}

TEST(CommP2P, ExchangeIdiomsCompleteOnBothTransports) {
  // The MPI idioms that post the other half of an exchange before waiting:
  // each rank's queued receive must not wait for a send queued behind it.
  // Messages of 3 MiB do not fit in the wires' buffers, so nothing completes
  // eagerly. Three ranks: every rank talks to both neighbours.
  for (const char* transport : {"shm", "tcp"}) {
    expect_all_pass(3, [transport](int rank, int size, std::shared_ptr<Store> store) {
      auto c = make_comm(rank, size, store, 20, transport);
      const int right = (rank + 1) % size, left = (rank + size - 1) % size;
      const size_t n = (3u << 20) / 8 + 5;
      auto pattern = [&](int from, int round, size_t i) {
        return int64_t(from) * 1000000007 + int64_t(round) * 1000 + int64_t(i % 997);
      };
      auto check = [&](const std::vector<int64_t>& got, int from, int round, const char* what) {
        size_t bad = 0;
        for (size_t i = 0; i < got.size(); ++i) bad += got[i] != pattern(from, round, i);
        EXPECT_EQ(bad, 0u) << transport << " " << what << " rank " << rank;
      };
      std::vector<int64_t> out(n), in(n, -1);
      auto fill = [&](int round) {
        for (size_t i = 0; i < n; ++i) out[i] = pattern(rank, round, i);
      };
      // 1. irecv from the left, blocking send to the right, wait.
      fill(1);
      Work r1 = c->recv_async(in.data(), n, DType::kI64, left, 1);
      c->send(out.data(), n, DType::kI64, right, 1);
      r1.wait();
      check(in, left, 1, "irecv + send");
      // 2. isend to the right, blocking recv from the left.
      fill(2);
      Work s2 = c->send_async(out.data(), n, DType::kI64, right, 2);
      c->recv(in.data(), n, DType::kI64, left, 2);
      s2.wait();
      check(in, left, 2, "isend + recv");
      // 3. both async, waited in the opposite order, with a collective
      //    between this exchange and the next.
      fill(3);
      Work r3 = c->recv_async(in.data(), n, DType::kI64, left, 3);
      Work s3 = c->send_async(out.data(), n, DType::kI64, right, 3);
      s3.wait();
      r3.wait();
      check(in, left, 3, "isend + irecv");
      int64_t x = rank, sum = 0;
      c->all_reduce(&x, &sum, 1, DType::kI64, ReduceOp::kSum);
      EXPECT_EQ(sum, int64_t(size * (size - 1) / 2));
      // 4. two exchanges in flight at once, the other way round the ring.
      std::vector<int64_t> in2(n, -1);
      fill(4);
      Work a = c->recv_async(in.data(), n, DType::kI64, right, 4);
      Work b = c->recv_async(in2.data(), n, DType::kI64, left, 5);
      Work d = c->send_async(out.data(), n, DType::kI64, left, 4);
      c->send(out.data(), n, DType::kI64, right, 5);
      a.wait();
      b.wait();
      d.wait();
      check(in, right, 4, "two exchanges (from the right)");
      check(in2, left, 4, "two exchanges (from the left)");
      c->barrier();
    }, std::chrono::seconds(120));
  }
}

TEST(CommP2P, UnmatchedReceiveTimesOutNamingPeerAndBytes) {
  auto res = run_ranks(2, [](int rank, int size, std::shared_ptr<Store> store) {
    auto c = make_comm(rank, size, store, 2);
    c->barrier();
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::seconds(5));  // never sends
      return;
    }
    std::vector<float> v(1 << 20);
    double t0 = now_s();
    Work w = c->recv_async(v.data(), v.size(), DType::kF32, 1, 9);
    Work w2 = c->recv_async(v.data(), 4, DType::kF32, 1, 10);
    auto e = expect_error([&] { w.wait(); });
    EXPECT_EQ(e.code(), Errc::kTimeout) << e.what();
    EXPECT_GE(now_s() - t0, 1.9) << e.what();  // the 2 s deadline, not earlier
    EXPECT_LT(now_s() - t0, 4.5);
    std::string m = e.what();
    EXPECT_TRUE(contains(m, "rank 0: recv from rank 1") && contains(m, "tag 9") &&
                contains(m, "0/4194304 bytes") && contains(m, "waiting on rank 1 (pid"))
        << m;
    // The receive queued behind it fails too, and names itself.
    auto e2 = expect_error([&] { w2.wait(); });
    EXPECT_TRUE(contains(e2.what(), "count 4 f32")) << e2.what();
    EXPECT_TRUE(contains(c->flight_record(), "FAILED")) << c->flight_record();
  }, std::chrono::seconds(60));
  EXPECT_EQ(res[0].exit_code, 0) << res[0].output;
}

TEST(CommP2P, PeerDeathFailsAQueuedExchangeQuickly) {
  for (const char* transport : {"shm", "tcp"}) {
    auto res = run_ranks(2, [transport](int rank, int size, std::shared_ptr<Store> store) {
      auto c = make_comm(rank, size, store, 60, transport);
      c->barrier();
      if (rank == 1) ::_exit(0);  // dies without a word
      // 64 MiB out: more than any wire buffers, so the send cannot
      // complete without the peer.
      std::vector<float> in(1 << 20), out(16 << 20, 1.0f);
      double t0 = now_s();
      Work r = c->recv_async(in.data(), in.size(), DType::kF32, 1, 3);
      Work s = c->send_async(out.data(), out.size(), DType::kF32, 1, 3);
      auto e = expect_error([&] { r.wait(); });
      auto e2 = expect_error([&] { s.wait(); });
      EXPECT_LT(now_s() - t0, 10.0) << transport;
      EXPECT_EQ(e.code(), Errc::kPeerDied) << transport << ": " << e.what();
      EXPECT_TRUE(contains(e.what(), "recv from rank 1")) << transport << ": " << e.what();
      EXPECT_TRUE(contains(e2.what(), "send to rank 1")) << transport << ": " << e2.what();
    }, std::chrono::seconds(60));
    EXPECT_EQ(res[0].exit_code, 0) << transport << ": " << res[0].output;
  }
}
