// Communicator::alloc_shared and the "shared" collectives (src/comm/algo/
// shared.cc), with real processes: results against a serial fold, bitwise
// equality with the direct algorithm, the path actually taken
// (Communicator::last_algorithm), overrides, async overlap, TCP fallback,
// sub-communicators, a rank passing private memory while its peers pass
// shared memory, and a peer dying.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>

#include <cstring>
#include <random>

#include "braid/comm.h"
#include "braid/env.h"
#include "braid/reduce.h"
#include "support/multiproc.h"

using namespace braid;
using braid::testing::expect_all_pass;
using braid::testing::make_comm;
using braid::testing::run_ranks;

namespace {

// A small integer `v` stored as one element of `t` (exact in every dtype).
void put(uint8_t* dst, DType t, double v) {
  switch (t) {
    case DType::kF32: { float f = float(v); std::memcpy(dst, &f, 4); break; }
    case DType::kBF16: { uint16_t h = f32_to_bf16(float(v)); std::memcpy(dst, &h, 2); break; }
    case DType::kI32: { int32_t x = int32_t(v); std::memcpy(dst, &x, 4); break; }
    case DType::kI64: { int64_t x = int64_t(v); std::memcpy(dst, &x, 8); break; }
    case DType::kF64: std::memcpy(dst, &v, 8); break;
    default: FAIL() << "no test values for " << dtype_name(t);
  }
}

float value(int rank, size_t i, int salt) {
  return float(int((rank * 7 + i * 3 + size_t(salt)) % 5) - 2);
}

// Every rank's input for `salt`, reduced in rank order with the kernels.
void check_matrix(Communicator& c) {
  const int r = c.rank(), n = c.size();
  const size_t counts[] = {0, 1, 7, 1000, 4096, (size_t(1) << 20) + 3};
  const DType types[] = {DType::kF32, DType::kBF16, DType::kI32, DType::kF64};
  const size_t max_bytes = ((size_t(1) << 20) + 3) * 8 + 4096;
  SharedBuffer buf = c.alloc_shared(max_bytes + size_t(r) * 64);
  ASSERT_EQ(buf.bytes(), max_bytes + size_t(r) * 64);
  ASSERT_EQ(buf.shared(), n > 1);
  int salt = 0;
  for (DType t : types) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg}) {
      if (op == ReduceOp::kAvg && t == DType::kI32) continue;
      for (size_t count : counts) {
        ++salt;
        const size_t es = dtype_size(t);
        // Each rank at its own offset: descriptors carry offsets, not addresses.
        uint8_t* mine = buf.as<uint8_t>() + size_t(r) * 64;
        std::vector<uint8_t> want(count * es), cur(count * es);
        auto fill = [&](uint8_t* dst, int rank) {
          for (size_t i = 0; i < count; ++i) put(dst + i * es, t, value(rank, i, salt));
        };
        fill(want.data(), 0);
        for (int q = 1; q < n; ++q) {
          fill(cur.data(), q);
          reduce2(want.data(), want.data(), cur.data(), count, t, op);
        }
        if (op == ReduceOp::kAvg) scale_avg(want.data(), count, t, n);
        fill(mine, r);
        c.all_reduce(mine, mine, count, t, op);
        ASSERT_EQ(0, count ? std::memcmp(mine, want.data(), count * es) : 0)
            << dtype_name(t) << " " << reduce_op_name(op) << " count " << count;
        if (n > 1 && count * es >= Communicator::kSharedMinBytes) {
          EXPECT_EQ(c.last_algorithm(), "shared");
        }
      }
    }
  }
}

// all_gather (recv shared) and reduce_scatter (send shared), in place and
// out of place, against the values every rank can compute.
void check_gather_scatter(Communicator& c) {
  const int r = c.rank(), n = c.size();
  for (size_t count : {size_t(1), size_t(300), size_t(70001)}) {
    for (DType t : {DType::kF32, DType::kBF16, DType::kI64}) {
      const size_t es = dtype_size(t), total = count * size_t(n);
      auto val = [](int rank, size_t i) { return double(int((rank * 5 + i * 7) % 9) - 4); };
      SharedBuffer out = c.alloc_shared(total * es), in = c.alloc_shared(total * es);
      std::vector<uint8_t> want(total * es), mine(count * es);
      // all_gather, out of place (private send) and in place.
      for (size_t i = 0; i < count; ++i) put(mine.data() + i * es, t, val(r, i));
      for (int p = 0; p < n; ++p)
        for (size_t i = 0; i < count; ++i) put(want.data() + (size_t(p) * count + i) * es, t, val(p, i));
      for (bool in_place : {false, true}) {
        std::memset(out.data(), 0xEE, total * es);
        uint8_t* o = out.as<uint8_t>();
        if (in_place) std::memcpy(o + size_t(r) * count * es, mine.data(), count * es);
        c.all_gather(in_place ? o + size_t(r) * count * es : mine.data(), o, count, t);
        ASSERT_EQ(0, std::memcmp(o, want.data(), total * es))
            << "all_gather " << dtype_name(t) << " count " << count << " in place " << in_place;
        if (n > 1 && total * es >= Communicator::kSharedMinBytes) {
          EXPECT_EQ(c.last_algorithm(), "shared");
        }
      }
      // reduce_scatter: rank r gets block r of the sum, out of place and in place.
      // Block r of every rank's input, folded in rank order.
      std::vector<uint8_t> w(count * es), cur(count * es), got(count * es);
      for (size_t i = 0; i < count; ++i) put(w.data() + i * es, t, val(0, size_t(r) * count + i));
      for (int p = 1; p < n; ++p) {
        for (size_t i = 0; i < count; ++i) put(cur.data() + i * es, t, val(p, size_t(r) * count + i));
        reduce2(w.data(), w.data(), cur.data(), count, t, ReduceOp::kSum);
      }
      for (bool in_place : {false, true}) {
        uint8_t* src = in.as<uint8_t>();
        for (size_t i = 0; i < total; ++i) put(src + i * es, t, val(r, i));
        uint8_t* dst = in_place ? src + size_t(r) * count * es : got.data();
        c.reduce_scatter(src, dst, count, t, ReduceOp::kSum);
        ASSERT_EQ(0, std::memcmp(dst, w.data(), count * es))
            << "reduce_scatter " << dtype_name(t) << " count " << count << " in place " << in_place;
        if (n > 1 && total * es >= Communicator::kSharedMinBytes) {
          EXPECT_EQ(c.last_algorithm(), "shared");
        }
      }
    }
  }
}

void body(int rank, int size, std::shared_ptr<Store> store) {
  auto c = make_comm(rank, size, store, 60);
  check_matrix(*c);
  check_gather_scatter(*c);

  // Zero-filled, and out of place (private send, shared recv).
  const size_t n = 300007;
  SharedBuffer out = c->alloc_shared(n * 4);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(out.as<float>()[i], 0.0f);
  std::mt19937 rng(77 + rank);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> in(n);
  for (auto& v : in) v = dist(rng) * 1000.0f;
  c->all_reduce(in.data(), out.data(), n, DType::kF32, ReduceOp::kSum);

  // Bitwise the direct algorithm's rank-order fold, on random floats.
  std::vector<float> direct(n);
  c->set_algorithm("all_reduce", "direct");
  c->all_reduce(in.data(), direct.data(), n, DType::kF32, ReduceOp::kSum);
  EXPECT_EQ(0, std::memcmp(out.data(), direct.data(), n * 4));

  // An override wins over the shared path, and still computes the sum.
  std::memcpy(out.data(), in.data(), n * 4);
  c->set_algorithm("all_reduce", "ring");
  c->all_reduce(out.data(), out.data(), n, DType::kF32, ReduceOp::kSum);
  if (size > 1) {
    EXPECT_EQ(c->last_algorithm(), "ring");
  }
  for (size_t i = 0; i < n; ++i)
    ASSERT_NEAR(out.as<float>()[i], direct[i], 1e-3f * std::max(1.0f, std::fabs(direct[i])));
  c->set_algorithm("all_reduce", "auto");

  // Two async reductions in flight on two regions.
  SharedBuffer a = c->alloc_shared(n * 4), b = c->alloc_shared(n * 4);
  for (size_t i = 0; i < n; ++i) {
    a.as<float>()[i] = float(rank + 1);
    b.as<float>()[i] = float(i % 7) * float(rank);
  }
  Work wa = c->all_reduce_async(a.data(), a.data(), n, DType::kF32, ReduceOp::kSum);
  Work wb = c->all_reduce_async(b.data(), b.data(), n, DType::kF32, ReduceOp::kSum);
  wa.wait();
  wb.wait();
  const float ranks_sum = float(size * (size + 1) / 2), idx_sum = float(size * (size - 1) / 2);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(a.as<float>()[i], ranks_sum);
    ASSERT_EQ(b.as<float>()[i], float(i % 7) * idx_sum);
  }
}

}  // namespace

TEST(SharedMemory, World1) { expect_all_pass(1, body, std::chrono::seconds(300)); }
TEST(SharedMemory, World2) { expect_all_pass(2, body, std::chrono::seconds(300)); }
TEST(SharedMemory, World3) { expect_all_pass(3, body, std::chrono::seconds(300)); }
TEST(SharedMemory, World4) { expect_all_pass(4, body, std::chrono::seconds(400)); }

TEST(SharedMemory, SubCommunicatorsShareWithinTheirGroup) {
  expect_all_pass(4, [](int rank, int size, std::shared_ptr<Store> store) {
    auto c = make_comm(rank, size, store, 60);
    auto sub = c->split(rank % 2, rank);  // {0, 2} and {1, 3}
    ASSERT_NE(sub, nullptr);
    const size_t n = 100003;
    SharedBuffer g = sub->alloc_shared(n * 4);
    SharedBuffer w = c->alloc_shared(n * 4);
    EXPECT_TRUE(g.shared());
    EXPECT_TRUE(w.shared());
    for (size_t i = 0; i < n; ++i) {
      g.as<float>()[i] = float(rank);
      w.as<float>()[i] = float(rank + 1);
    }
    // The group's reduction in flight while the parent reduces its own buffer.
    Work wg = sub->all_reduce_async(g.data(), g.data(), n, DType::kF32, ReduceOp::kSum);
    c->all_reduce(w.data(), w.data(), n, DType::kF32, ReduceOp::kSum);
    wg.wait();
    const float group_sum = rank % 2 == 0 ? 0.0f + 2.0f : 1.0f + 3.0f;
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(g.as<float>()[i], group_sum);
      ASSERT_EQ(w.as<float>()[i], 10.0f);
    }
    EXPECT_EQ(sub->last_algorithm(), "shared");
  });
}

// One rank cannot create its object (here a file size limit makes
// ftruncate fail; a full /dev/shm makes posix_fallocate fail the same way):
// every rank gets private memory, and no rank is left on the shared path.
TEST(SharedMemory, NoRoomOnOneRankFallsBackEverywhere) {
  expect_all_pass(3, [](int rank, int size, std::shared_ptr<Store> store) {
    auto c = make_comm(rank, size, store, 60);
    if (rank == 1) {
      ::signal(SIGXFSZ, SIG_IGN);
      rlimit lim{1 << 16, 1 << 16};  // files (shm objects too) up to 64 KiB
      ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &lim), 0);
    }
    SharedBuffer big = c->alloc_shared(8 << 20);
    EXPECT_FALSE(big.shared()) << "rank " << rank;
    const size_t n = big.bytes() / 4;
    for (size_t i = 0; i < n; ++i) big.as<float>()[i] = float(rank);
    c->all_reduce(big.data(), big.data(), n, DType::kF32, ReduceOp::kSum);
    EXPECT_NE(c->last_algorithm(), "shared");
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(big.as<float>()[i], 3.0f);
    SharedBuffer small = c->alloc_shared(4 << 10);  // fits: shared again
    EXPECT_TRUE(small.shared()) << "rank " << rank;
  });
}

TEST(SharedMemory, TcpFallsBackToPrivateMemory) {
  expect_all_pass(2, [](int rank, int size, std::shared_ptr<Store> store) {
    auto c = make_comm(rank, size, store, 60, "tcp");
    SharedBuffer buf = c->alloc_shared(1 << 20);
    EXPECT_FALSE(buf.shared());
    const size_t n = buf.bytes() / 4;
    for (size_t i = 0; i < n; ++i) buf.as<float>()[i] = float(rank + 1);
    c->all_reduce(buf.data(), buf.data(), n, DType::kF32, ReduceOp::kSum);
    EXPECT_NE(c->last_algorithm(), "shared");
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(buf.as<float>()[i], 3.0f);
  });
}

TEST(SharedMemory, PrivateBufferOnOneRankIsAnErrorNotAHang) {
  auto res = run_ranks(2, [](int rank, int size, std::shared_ptr<Store> store) {
    auto c = make_comm(rank, size, store, 20);
    SharedBuffer buf = c->alloc_shared(1 << 20);
    std::vector<float> priv(buf.bytes() / 4, 1.0f);
    float* p = rank == 0 ? buf.as<float>() : priv.data();
    double t0 = now_s();
    try {
      c->all_reduce(p, p, priv.size(), DType::kF32, ReduceOp::kSum);
      ADD_FAILURE() << "rank " << rank << ": expected braid::Error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::kMismatch) << e.what();
      // Names this rank, the call, the peer, and both sides of the mismatch.
      const std::string m = e.what(), other = std::to_string(1 - rank);
      EXPECT_TRUE(m.find("rank " + std::to_string(rank) + ": all_reduce seq ") == 0 &&
                  m.find("rank " + other + " (pid ") != std::string::npos &&
                  m.find("expected all_reduce") != std::string::npos &&
                  m.find("sent all_reduce") != std::string::npos)
          << m;
    }
    EXPECT_LT(now_s() - t0, 15.0);
  }, std::chrono::seconds(60));
  for (auto& r : res) EXPECT_EQ(r.exit_code, 0) << "rank " << r.rank << ": " << r.output;
}

TEST(SharedMemory, PeerDeathFailsTheReduction) {
  auto res = run_ranks(3, [](int rank, int size, std::shared_ptr<Store> store) {
    auto c = make_comm(rank, size, store, 60);
    SharedBuffer buf = c->alloc_shared(4 << 20);
    const size_t n = buf.bytes() / 4;
    c->all_reduce(buf.data(), buf.data(), n, DType::kF32, ReduceOp::kSum);
    if (rank == 2) ::_exit(0);  // dies without a word, its memory still mapped by the others
    double t0 = now_s();
    try {
      c->all_reduce(buf.data(), buf.data(), n, DType::kF32, ReduceOp::kSum);
      ADD_FAILURE() << "rank " << rank << ": expected braid::Error";
    } catch (const Error& e) {
      EXPECT_TRUE(e.code() == Errc::kPeerDied || e.code() == Errc::kTimeout) << e.what();
      // Names this rank, the call and the dead peer.
      const std::string m = e.what();
      EXPECT_TRUE(m.find("rank " + std::to_string(rank) + ": all_reduce seq ") == 0 &&
                  m.find("peer rank 2 (pid ") != std::string::npos)
          << m;
    }
    EXPECT_LT(now_s() - t0, 10.0);
  }, std::chrono::seconds(90));
  EXPECT_EQ(res[0].exit_code, 0) << res[0].output;
  EXPECT_EQ(res[1].exit_code, 0) << res[1].output;
}
