// The communicator's contract as include/braid/comm.h states it, where it
// is easiest to break: ranks that disagree on who sends (a rooted
// collective's root), in-place all_to_all, a receive posted before a
// collective, and the codes of errors a rank learns from another.
// Real processes; each case gets a fresh communicator (a failed one is
// broken for good), over a prefix of the job's store.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "braid/comm.h"
#include "braid/env.h"
#include "support/multiproc.h"

using namespace braid;
using braid::testing::expect_all_pass;

namespace {

bool contains(const std::string& s, const std::string& sub) {
  return s.find(sub) != std::string::npos;
}

std::shared_ptr<Communicator> fresh_comm(int rank, int size, const std::shared_ptr<Store>& store,
                                         const std::string& name, int timeout_s = 20,
                                         const std::string& transport = "") {
  return braid::testing::make_comm(rank, size, make_prefix_store(store, name + "/"), timeout_s,
                                   transport);
}

// Runs `call` then a barrier (the next call); returns the error either
// raised, and how long it took to come.
struct Outcome {
  bool threw = false;
  Errc code = Errc::kInternal;
  std::string what;
  double seconds = 0;
};
Outcome call_then_barrier(Communicator& c, const std::function<void()>& call) {
  Outcome o;
  const double t0 = now_s();
  try {
    call();
    c.barrier();
  } catch (const Error& e) {
    o.threw = true;
    o.code = e.code();
    o.what = e.what();
  }
  o.seconds = now_s() - t0;
  return o;
}

// Each rank passes root rank % 2 (flip: (rank + 1) % 2), so at 2 ranks
// both ranks believe they only send (or, flipped, only receive).
void root_disagreement_cases(int rank, int size, const std::shared_ptr<Store>& store,
                             const std::vector<std::string>& ops, const std::string& transport) {
  int idx = 0;
  for (const std::string& op : ops)
    for (size_t bytes : {size_t(1) << 10, size_t(1) << 20, size_t(16) << 20})
      for (int flip : {0, 1}) {
        const std::string name = "root" + std::to_string(idx++);
        auto c = fresh_comm(rank, size, store, name, 20, transport);
        const int root = (rank + flip) % 2;
        const size_t count = bytes / 4;
        std::vector<float> a(count * size_t(size), float(rank + 1)), b(count * size_t(size));
        Outcome o = call_then_barrier(*c, [&] {
          if (op == "broadcast") c->broadcast(a.data(), count, DType::kF32, root);
          else if (op == "reduce")
            c->reduce(a.data(), b.data(), count, DType::kF32, ReduceOp::kSum, root);
          else if (op == "gather") c->gather(a.data(), b.data(), count, DType::kF32, root);
          else c->scatter(a.data(), b.data(), count, DType::kF32, root);
        });
        const std::string where = op + " of " + std::to_string(bytes) + " bytes, roots " +
                                  (flip ? "(rank+1)%2" : "rank%2") + " over " +
                                  (transport.empty() ? "shm" : transport) + ", " +
                                  std::to_string(size) + " ranks";
        EXPECT_TRUE(o.threw) << where << ": no error on rank " << rank;
        EXPECT_EQ(o.code, Errc::kMismatch) << where << ": " << o.what;
        EXPECT_LT(o.seconds, 1.0) << where << ": " << o.what;
      }
}

}  // namespace

TEST(Contract, RootDisagreementRaisesMismatchOnEveryRank) {
  for (int n : {2, 3, 4}) {
    // Every rooted collective at 2 ranks; broadcast (the common one) at 3, 4.
    std::vector<std::string> ops = {"broadcast"};
    if (n == 2) ops = {"broadcast", "reduce", "gather", "scatter"};
    expect_all_pass(n, [&](int rank, int size, std::shared_ptr<Store> store) {
      root_disagreement_cases(rank, size, store, ops, "");
    }, std::chrono::seconds(180), {"BRAID_PROBE=0"});
  }
}

TEST(Contract, RootDisagreementOverTcp) {
  expect_all_pass(2, [](int rank, int size, std::shared_ptr<Store> store) {
    root_disagreement_cases(rank, size, store, {"broadcast", "gather"}, "tcp");
  }, std::chrono::seconds(180), {"BRAID_PROBE=0"});
}

TEST(Contract, InPlaceAllToAll) {
  for (int n = 1; n <= 8; ++n) {
    expect_all_pass(n, [](int rank, int size, std::shared_ptr<Store> store) {
      auto c = fresh_comm(rank, size, store, "a2a");
      for (size_t count : {size_t(1), size_t(1000), size_t(300000)}) {
        // Block j of rank r holds r * 1000 + j, offset by the element index.
        std::vector<int32_t> v(count * size_t(size));
        for (int j = 0; j < size; ++j)
          for (size_t i = 0; i < count; ++i) v[size_t(j) * count + i] = rank * 1000 + j + int32_t(i);
        c->all_to_all(v.data(), v.data(), count, DType::kI32);
        for (int j = 0; j < size; ++j)
          for (size_t i = 0; i < count; i += 97)
            ASSERT_EQ(v[size_t(j) * count + i], j * 1000 + rank + int32_t(i))
                << "block " << j << " element " << i << " count " << count;
        // all_to_all_v in place: rank r sends j + 1 elements to rank j.
        std::vector<size_t> sc(size), sd(size), rc(size), rd(size);
        for (int j = 0; j < size; ++j) {
          sc[j] = size_t(j + 1);
          rc[j] = size_t(rank + 1);
        }
        std::exclusive_scan(sc.begin(), sc.end(), sd.begin(), size_t(0));
        std::exclusive_scan(rc.begin(), rc.end(), rd.begin(), size_t(0));
        const size_t total = std::max(sd.back() + sc.back(), rd.back() + rc.back());
        std::vector<int32_t> w(total, -1);
        for (int j = 0; j < size; ++j)
          for (size_t i = 0; i < sc[j]; ++i) w[sd[j] + i] = rank * 1000 + j * 10 + int32_t(i);
        c->all_to_all_v(w.data(), sc, sd, w.data(), rc, rd, DType::kI32);
        for (int j = 0; j < size; ++j)
          for (size_t i = 0; i < rc[j]; ++i)
            ASSERT_EQ(w[rd[j] + i], j * 1000 + rank * 10 + int32_t(i)) << "from " << j;
      }
    }, std::chrono::seconds(120), {"BRAID_PROBE=0"});
  }
}

// MPI's irecv: a receive posted early must not hold up a collective that
// runs before its matching send, on either transport.
TEST(Contract, ReceivePostedBeforeACollective) {
  for (const char* transport : {"shm", "tcp"}) {
    expect_all_pass(2, [transport](int rank, int size, std::shared_ptr<Store> store) {
      auto c = fresh_comm(rank, size, store, "irecv", 10, transport);
      const int peer = 1 - rank;
      for (size_t count : {size_t(16), size_t(1) << 20}) {
        std::vector<float> in(count, 0.0f), out(count, float(rank + 1));
        Work r = c->recv_async(in.data(), count, DType::kF32, peer, 5);
        std::vector<float> g(count, 1.0f);
        c->all_reduce(g.data(), g.data(), count, DType::kF32, ReduceOp::kSum);
        EXPECT_EQ(g[count - 1], float(size)) << transport;
        c->broadcast(g.data(), count, DType::kF32, 0);
        c->send(out.data(), count, DType::kF32, peer, 5);
        r.wait();
        EXPECT_EQ(in[0], float(peer + 1)) << transport;
        EXPECT_EQ(in[count - 1], float(peer + 1)) << transport;
      }
      // A send posted early, before a collective, with its receive after.
      std::vector<float> big(1 << 20, float(rank)), got(1 << 20);
      Work s = c->send_async(big.data(), big.size(), DType::kF32, peer, 6);
      c->barrier();
      c->recv(got.data(), got.size(), DType::kF32, peer, 6);
      s.wait();
      EXPECT_EQ(got[12345], float(peer)) << transport;
    }, std::chrono::seconds(60), {"BRAID_PROBE=0"});
  }
}

// A rank that learns of another rank's failure keeps its code and names
// itself and its own call, then the first failure.
TEST(Contract, ForwardedErrorsKeepTheirCode) {
  for (const char* transport : {"shm", "tcp"}) {
    expect_all_pass(3, [transport](int rank, int size, std::shared_ptr<Store> store) {
      // Mismatch: rank 2 passes another count; ranks 0 and 1 may only
      // learn of it from rank 2.
      {
        auto c = fresh_comm(rank, size, store, std::string("mm") + transport, 20, transport);
        std::vector<float> v(4096, 1.0f);
        const size_t count = rank == 2 ? 4095 : 4096;
        Outcome o = call_then_barrier(*c, [&] {
          c->all_reduce(v.data(), v.data(), count, DType::kF32, ReduceOp::kSum);
        });
        EXPECT_EQ(o.code, Errc::kMismatch) << transport << ": " << o.what;
        EXPECT_TRUE(contains(o.what, "rank " + std::to_string(rank) + ": ")) << o.what;
        EXPECT_TRUE(contains(o.what, "count 4095") && contains(o.what, "count 4096")) << o.what;
        EXPECT_LT(o.seconds, 3.0) << o.what;
      }
      // Timeout: rank 2 never calls. Rank 0's deadline is 1 s, rank 1's
      // 20 s: rank 1 learns of rank 0's timeout, and says kTimeout too.
      {
        auto c = fresh_comm(rank, size, store, std::string("to") + transport, rank == 0 ? 1 : 20,
                            transport);
        std::vector<float> v(64, 1.0f);
        if (rank < 2) {
          Outcome o = call_then_barrier(*c, [&] {
            c->all_reduce(v.data(), v.data(), v.size(), DType::kF32, ReduceOp::kSum);
          });
          EXPECT_EQ(o.code, Errc::kTimeout) << transport << ": " << o.what;
          EXPECT_TRUE(contains(o.what, "rank " + std::to_string(rank) + ": all_reduce seq"))
              << o.what;
          EXPECT_TRUE(contains(o.what, "timed out")) << o.what;
          EXPECT_LT(o.seconds, 5.0) << o.what;
        } else {
          ::usleep(3000 * 1000);  // past rank 0's deadline; then leaves
        }
      }
    }, std::chrono::seconds(120), {"BRAID_PROBE=0"});
  }
}

TEST(Contract, UnsupportedOpDtypePairIsNotSupported) {
  expect_all_pass(1, [](int rank, int size, std::shared_ptr<Store> store) {
    auto c = fresh_comm(rank, size, store, "ns");
    std::vector<float> v(4);
    try {
      c->all_reduce(v.data(), v.data(), 4, DType::kF32, ReduceOp::kBand);
      ADD_FAILURE() << "band on f32 accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::kNotSupported) << e.what();
      EXPECT_TRUE(contains(e.what(), "band") && contains(e.what(), "f32")) << e.what();
    }
  });
}
