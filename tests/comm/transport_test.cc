// Transport tests: real processes (tests/support/multiproc.h), shm and tcp.
// The shm single-copy path has its own file, shm_transport_test.cc.
#include "comm/transport/transport.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <thread>
#include <vector>

#include "braid/env.h"
#include "braid/error.h"
#include "comm/store/auth.h"
#include "comm/transport/wire.h"
#include "support/multiproc.h"
#include "transport_util.h"

namespace braid::comm {
namespace {

using testing::expect_all_pass;
using namespace std::chrono_literals;
using tutil::drive;
using tutil::make;
using tutil::ring_exchange;
using tutil::sig_of;

std::string expected_kind(const std::string& mode) { return mode == "tcp" ? "tcp" : "shm"; }

// CPU time this process has used, all threads, in seconds.
double process_cpu_s() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

class TransportModes : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

// Every rank sends messages of several sizes to the next rank and receives
// from the previous one, all posted at once (ordering per direction).
TEST_P(TransportModes, RingExchangeSizes) {
  auto [mode, n] = GetParam();
  expect_all_pass(n, [mode = mode](int rank, int size, std::shared_ptr<Store> store) {
    auto t = make(rank, size, *store, mode);
    const int next = (rank + 1) % size;
    EXPECT_EQ(t->kind_to(rank), "self");
    EXPECT_EQ(t->kind_to(next), expected_kind(mode));
    EXPECT_NE(t->describe_peer(next).find("rank " + std::to_string(next) + " (pid "), std::string::npos);
    ring_exchange(*t, rank, size, {0, 1, 7, 1000, (1u << 20) + 3, 8}, CollOp::kSend);
    // A message to oneself.
    uint32_t a = 0x12345678, b = 0;
    Request s, r;
    s.kind = Request::Kind::kSend;
    s.peer = rank;
    s.sig = sig_of(CollOp::kBarrier, 99, 1, 4);
    s.src = &a;
    r.kind = Request::Kind::kRecv;
    r.peer = rank;
    r.sig = s.sig;
    r.dst = &b;
    t->post(&r);
    t->post(&s);
    drive(*t, {&s, &r});
    EXPECT_EQ(b, a);
  }, 60s);
}

// kRecvReduce f32/f64 sum around a ring; sizes that are not multiples of
// the shm slot, plus an odd TCP receive buffer so elements straddle reads.
TEST_P(TransportModes, RecvReduceSum) {
  auto [mode, n] = GetParam();
  expect_all_pass(n, [mode = mode](int rank, int size, std::shared_ptr<Store> store) {
    auto t = make(rank, size, *store, mode);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    const std::vector<size_t> counts = {1, 1000, 32768 + 3, 3 * 32768 + 5, 300001};
    uint64_t seq = 0;
    for (size_t c : counts) {
      // f32 into a separate destination.
      std::vector<float> mine(c), acc(c), dst(c, -1.f);
      for (size_t i = 0; i < c; ++i) {
        mine[i] = float((rank * 7 + i) % 1000);
        acc[i] = float((rank * 3 + i * 5) % 777);
      }
      Request s, r;
      s.kind = Request::Kind::kSend;
      s.peer = next;
      s.sig = sig_of(CollOp::kAllReduce, seq, c, c * 4, DType::kF32);
      s.src = mine.data();
      r.kind = Request::Kind::kRecvReduce;
      r.peer = prev;
      r.sig = s.sig;
      r.dst = dst.data();
      r.acc = acc.data();
      r.dtype = DType::kF32;
      r.rop = ReduceOp::kSum;
      t->post(&s);
      t->post(&r);
      drive(*t, {&s, &r});
      for (size_t i = 0; i < c; ++i)
        if (dst[i] != acc[i] + float((prev * 7 + i) % 1000)) {
          ADD_FAILURE() << "f32 count " << c << " wrong at " << i << ": " << dst[i];
          break;
        }
      ++seq;
      // f64 in place (dst == acc).
      std::vector<double> m64(c), a64(c), keep(c);
      for (size_t i = 0; i < c; ++i) {
        m64[i] = double(rank + 1) * double(i % 4099);
        keep[i] = a64[i] = double(i % 313) - 100;
      }
      Request s2, r2;
      s2.kind = Request::Kind::kSend;
      s2.peer = next;
      s2.sig = sig_of(CollOp::kReduceScatter, seq, c, c * 8, DType::kF64);
      s2.src = m64.data();
      r2 = s2;
      r2.kind = Request::Kind::kRecvReduce;
      r2.peer = prev;
      r2.src = nullptr;
      r2.dst = a64.data();
      r2.acc = a64.data();
      r2.dtype = DType::kF64;
      r2.rop = ReduceOp::kSum;
      t->post(&r2);
      t->post(&s2);
      drive(*t, {&s2, &r2});
      for (size_t i = 0; i < c; ++i)
        if (a64[i] != keep[i] + double(prev + 1) * double(i % 4099)) {
          ADD_FAILURE() << "f64 count " << c << " wrong at " << i;
          break;
        }
      ++seq;
    }
  }, 60s, {"BRAID_TCP_RXBUF_BYTES=4099", "BRAID_SHM_SLOT_BYTES=65536"});
}

INSTANTIATE_TEST_SUITE_P(All, TransportModes,
                         ::testing::Combine(::testing::Values("auto", "tcp"), ::testing::Values(2, 3, 4)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::to_string(std::get<1>(info.param));
                         });

class TransportPair : public ::testing::TestWithParam<std::string> {};

// Both ranks send 64 MiB and receive 64 MiB at the same time.
TEST_P(TransportPair, SimultaneousLargeBothWays) {
  std::string mode = GetParam();
  expect_all_pass(2, [mode](int rank, int size, std::shared_ptr<Store> store) {
    auto t = make(rank, size, *store, mode);
    const size_t bytes = 64u << 20;
    std::vector<uint64_t> out(bytes / 8), in(bytes / 8, 0);
    for (size_t i = 0; i < out.size(); ++i) out[i] = (uint64_t(rank) << 56) ^ (i * 0x9E3779B97F4A7C15ull);
    Request s, r;
    tutil::send_recv_pair(1 - rank, 1 - rank, sig_of(CollOp::kAllToAll, 1, bytes, bytes), out.data(),
                          in.data(), s, r);
    t->post(&s);
    t->post(&r);
    drive(*t, {&s, &r}, 30s);
    for (size_t i = 0; i < in.size(); ++i)
      if (in[i] != ((uint64_t(1 - rank) << 56) ^ (i * 0x9E3779B97F4A7C15ull))) {
        ADD_FAILURE() << "word " << i << " differs";
        break;
      }
  }, 60s);
}

// Rank 0 sends a different collective than rank 1 expects.
TEST_P(TransportPair, MismatchShowsBothSides) {
  std::string mode = GetParam();
  expect_all_pass(2, [mode](int rank, int size, std::shared_ptr<Store> store) {
    auto t = make(rank, size, *store, mode);
    std::vector<float> buf(1000, 1.f);
    if (rank == 0) {
      Request s;
      s.kind = Request::Kind::kSend;
      s.peer = 1;
      s.sig = sig_of(CollOp::kAllGather, 4, 10, 40, DType::kF32);
      s.src = buf.data();
      t->post(&s);
      drive(*t, {&s});
      store->get("mismatch_seen");  // stay alive until rank 1 has read it
      return;
    }
    Request r;
    r.kind = Request::Kind::kRecvReduce;
    r.peer = 0;
    r.sig = sig_of(CollOp::kAllReduce, 4, 1000, 4000, DType::kF32);
    r.dst = buf.data();
    r.acc = buf.data();
    r.dtype = DType::kF32;
    t->post(&r);
    tutil::expect_error(*t, {&r}, Errc::kMismatch,
                        {"rank 1 expected all_reduce seq 4 count 1000 f32 sum", "sent all_gather seq 4 count 10 f32",
                         "rank 0 (pid"},
                        "no mismatch detected");
    store->set_str("mismatch_seen", "1");
  }, 30s);
}

// One rank exits; the other's pending receive and blocked send fail with
// kPeerDied naming it within a few seconds.
TEST_P(TransportPair, PeerDeathFailsPendingRequests) {
  std::string mode = GetParam();
  expect_all_pass(2, [mode](int rank, int size, std::shared_ptr<Store> store) {
    auto t = make(rank, size, *store, mode);
    if (rank == 0) {
      std::this_thread::sleep_for(200ms);
      ::_exit(0);
    }
    std::vector<uint8_t> big(64u << 20, 1), small(100);
    Request s, r;
    s.kind = Request::Kind::kSend;
    s.peer = 0;
    s.sig = sig_of(CollOp::kBroadcast, 1, big.size(), big.size());
    s.src = big.data();
    r.kind = Request::Kind::kRecv;
    r.peer = 0;
    r.sig = sig_of(CollOp::kBroadcast, 2, 100, 100);
    r.dst = small.data();
    t->post(&s);
    t->post(&r);
    uint64_t t0 = now_ns();
    try {
      drive(*t, {&s, &r}, 20s);
      ADD_FAILURE() << "requests to a dead peer completed";
    } catch (const Error& e) {
      double secs = double(now_ns() - t0) * 1e-9;
      EXPECT_EQ(e.code(), Errc::kPeerDied) << e.what();
      EXPECT_NE(std::string(e.what()).find("peer rank 0 (pid"), std::string::npos) << e.what();
      EXPECT_LT(secs, 5.0) << e.what();
    }
  }, 30s);
}

// Two ranks are each pairs of sub-communicators: two transports per process
// used concurrently from two threads.
TEST_P(TransportPair, ConcurrentTransportsInOneProcess) {
  std::string mode = GetParam();
  expect_all_pass(2, [mode](int rank, int size, std::shared_ptr<Store> store) {
    auto body = [&](int id) {
      auto ps = make_prefix_store(store, "sub" + std::to_string(id) + "/");
      auto t = make(rank, size, *ps, mode);
      for (int it = 0; it < 200; ++it) {
        uint64_t out = uint64_t(rank * 1000 + id * 100 + it), in = 0;
        Request s, r;
        tutil::send_recv_pair(1 - rank, 1 - rank, sig_of(CollOp::kAllReduce, uint64_t(it), 1, 8), &out, &in, s, r);
        t->post(&s);
        t->post(&r);
        drive(*t, {&s, &r});
        if (in != uint64_t((1 - rank) * 1000 + id * 100 + it)) {
          ADD_FAILURE() << "sub " << id << " iteration " << it << " got " << in;
          return;
        }
      }
    };
    std::thread a(body, 0), b(body, 1);
    a.join();
    b.join();
  }, 30s);
}

// 8 ranks on a 2-core machine: waits must give the core up, not spin it
// away. Shared-memory waits poll between sched_yield() calls before
// sleeping (shm_wait_plan); "futex" turns that off, so every wait that
// outlasts the short spin sleeps on the doorbell. Rank 0 stops for kPause
// in the middle: the other seven wait on it, directly or through the ring,
// in waits of up to 20 ms as the communicator's (algo/context.cc), and must
// spend that time asleep. Seven ranks spinning (or polling without ever
// sleeping) would keep both cores busy for the whole pause.
TEST_P(TransportPair, EightRanksOversubscribed) {
  std::string mode = GetParam();
  static constexpr double kPause = 0.3;
  static constexpr int kPauseAt = 20;
  const std::string dir = testing::temp_dir("oversub");
  auto body = [mode, dir](int rank, int size, std::shared_ptr<Store> store) {
    auto t = make(rank, size, *store, mode);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    std::vector<uint32_t> out(1 << 18), in(1 << 18);
    double cpu0 = 0, wall0 = 0;
    for (int it = 0; it < 40; ++it) {
      if (it == kPauseAt) {
        cpu0 = process_cpu_s();
        wall0 = now_s();
        if (rank == 0) std::this_thread::sleep_for(std::chrono::duration<double>(kPause));
      }
      // Rank k waits in call kPauseAt + k - 1 at the latest (each rank's
      // send of a call is posted before it waits on that call's receive):
      // after `size` calls every rank has waited out the pause. Record
      // what that cost this rank.
      if (it == kPauseAt + size && rank != 0)
        std::ofstream(dir + "/" + std::to_string(rank)) << process_cpu_s() - cpu0 << " " << now_s() - wall0;
      size_t count = it % 2 ? out.size() : 3;  // 1 MiB and tiny messages
      for (size_t i = 0; i < count; ++i) out[i] = uint32_t(rank * 100000 + it * 1000 + i);
      Request s, r;
      tutil::send_recv_pair(next, prev, sig_of(CollOp::kAllGather, uint64_t(it), count, count * 4),
                            out.data(), in.data(), s, r);
      t->post(&s);
      t->post(&r);
      drive(*t, {&s, &r}, 30s, 20ms);
      ASSERT_EQ(in[count - 1], uint32_t(prev * 100000 + it * 1000 + count - 1));
    }
  };
  for (std::string waits : {"yield", "futex"}) {
    if (mode == "tcp" && waits == "futex") continue;  // tcp waits on epoll either way
    std::vector<std::string> env;
    if (waits == "futex") env.push_back("BRAID_YIELD_US=0");
    uint64_t t0 = now_ns();
    expect_all_pass(8, body, 60s, env);
    double cpu = 0, wall = 0;
    for (int r = 1; r < 8; ++r) {
      std::ifstream f(dir + "/" + std::to_string(r));
      double c = -1, w = -1;
      ASSERT_TRUE(f >> c >> w) << "rank " << r << " recorded nothing";
      cpu += c;
      wall = std::max(wall, w);
    }
    std::printf("  8 ranks, %s, %s waits: %.2f s; the 7 waiting ranks used %.3f s of CPU in %.3f s\n",
                mode.c_str(), waits.c_str(), double(now_ns() - t0) * 1e-9, cpu, wall);
    EXPECT_GE(wall, kPause) << mode << ", " << waits;
    // Sleeping waiters cost a few ms in all; spinning ones fill both cores
    // (2 × the pause, or less on a machine busy with other work, which can
    // only lower the figure).
    EXPECT_LT(cpu, 0.5 * wall) << mode << ", " << waits << ": the waiting ranks kept the cores busy";
  }
}

TEST(Transport, WaitPolicyFollowsOversubscription) {
  const int cores = usable_cores();
  ::unsetenv("BRAID_YIELD_US");
  ::unsetenv("BRAID_SPIN_US");
  EXPECT_EQ(shm_wait_plan(cores, cores).yield_ns, 0u);
  EXPECT_EQ(shm_wait_plan(cores, cores).spin_ns, 200'000u);
  EXPECT_EQ(shm_wait_plan(cores + 1, cores).yield_ns, 200'000u);
  EXPECT_EQ(shm_wait_plan(cores + 1, cores).spin_ns, 0u);  // yields instead of spinning
  EXPECT_EQ(spin_ns_for(cores, cores), 200'000u);           // other waits (tcp)
  EXPECT_EQ(spin_ns_for(cores + 1, cores), 2'000u);
  ::setenv("BRAID_YIELD_US", "7", 1);
  EXPECT_EQ(shm_wait_plan(cores, cores).yield_ns, 7'000u);
  EXPECT_EQ(shm_wait_plan(cores + 1, cores).yield_ns, 7'000u);
  EXPECT_EQ(shm_wait_plan(cores, cores).spin_ns, 0u);  // a yielding wait spins only if told to
  EXPECT_EQ(shm_wait_plan(cores + 1, cores).spin_ns, 0u);
  ::setenv("BRAID_SPIN_US", "3", 1);
  EXPECT_EQ(shm_wait_plan(cores + 1, cores).spin_ns, 3'000u);
  ::unsetenv("BRAID_SPIN_US");
  ::unsetenv("BRAID_YIELD_US");
}

TEST(Transport, HostCoresAreTheUnionOfItsRanksAffinities) {
  auto peer = [](const char* host, const char* cpus) {
    PeerInfo p;
    p.host_id = host;
    p.cpus = cpus;
    return p;
  };
  // mpirun -n 2 pins each rank to a core of its own: two cores, not one.
  EXPECT_EQ(host_cores({peer("h", "1"), peer("h", "2")}, "h"), 2);
  // Unpinned ranks share every core; other hosts do not count.
  EXPECT_EQ(host_cores({peer("h", "3"), peer("h", "3"), peer("g", "ff0")}, "h"), 2);
  EXPECT_EQ(host_cores({peer("h", "3"), peer("g", "ff0")}, "g"), 8);
  EXPECT_EQ(host_cores({peer("h", "100000000"), peer("h", "1")}, "h"), 2);  // CPU 32 and CPU 0
  // A mask that could not be read: this process's own view.
  EXPECT_EQ(host_cores({peer("h", "")}, "h"), usable_cores());
  // This process's mask, spelled as the peers' are.
  const std::string mine = affinity_hex();
  ASSERT_FALSE(mine.empty());
  EXPECT_EQ(host_cores({peer("h", mine.c_str())}, "h"), usable_cores());
}

INSTANTIATE_TEST_SUITE_P(All, TransportPair, ::testing::Values("auto", "tcp"));

// A communicator of one: only the self wire.
TEST(Transport, SingleRank) {
  expect_all_pass(1, [](int rank, int size, std::shared_ptr<Store> store) {
    auto t = make(rank, size, *store, "auto");
    EXPECT_EQ(t->kind_to(0), "self");
    std::vector<int32_t> a(1000, 3), acc(1000, 4), out(1000, 0);
    Request s, r;
    s.kind = Request::Kind::kSend;
    s.peer = 0;
    s.sig = sig_of(CollOp::kAllReduce, 0, 1000, 4000, DType::kI32);
    s.src = a.data();
    r = s;
    r.kind = Request::Kind::kRecvReduce;
    r.dst = out.data();
    r.acc = acc.data();
    r.dtype = DType::kI32;
    r.rop = ReduceOp::kMax;
    t->post(&s);
    t->post(&r);
    drive(*t, {&s, &r});
    EXPECT_EQ(out[999], 4);
    // Invalid requests are refused at post().
    Request bad = s;
    bad.peer = 1;
    EXPECT_THROW(t->post(&bad), Error);
  }, 30s);
}

// A peer that never shows up: set-up fails with kTimeout naming it.
TEST(Transport, SetupTimeoutNamesMissingPeer) {
  expect_all_pass(2, [](int rank, int size, std::shared_ptr<Store> store) {
    if (rank == 1) return;
    try {
      make(rank, size, *store, "auto", 500ms);
      ADD_FAILURE() << "set-up succeeded without rank 1";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::kTimeout) << e.what();
      EXPECT_NE(std::string(e.what()).find("peer rank(s) 1"), std::string::npos) << e.what();
    }
  }, 30s);
}

// "shm" mode with ranks on two (faked) hosts is refused; "auto" mixes the
// wires: shm inside each host, tcp between them.
TEST(Transport, MixedHostsUseShmAndTcp) {
  expect_all_pass(4, [](int rank, int size, std::shared_ptr<Store> store) {
    ::setenv("BRAID_HOST_ID", rank < 2 ? "hostA" : "hostB", 1);
    auto t = make(rank, size, *store, "auto");
    EXPECT_EQ(t->kind_to(rank ^ 1), "shm");
    EXPECT_EQ(t->kind_to(rank ^ 2), "tcp");
    // All-to-all of 300 KB blocks, then many tiny ones.
    const size_t bytes = 300000;
    std::vector<std::vector<uint8_t>> out(static_cast<size_t>(size)), in(static_cast<size_t>(size));
    std::vector<Request> reqs(size_t(2 * size));
    std::vector<Request*> all;
    for (int p = 0; p < size; ++p) {
      out[size_t(p)].assign(bytes, uint8_t(rank * 16 + p));
      in[size_t(p)].assign(bytes, 0);
      Request& s = reqs[size_t(2 * p)];
      Request& r = reqs[size_t(2 * p + 1)];
      tutil::send_recv_pair(p, p, sig_of(CollOp::kAllToAll, 0, bytes, bytes), out[size_t(p)].data(),
                            in[size_t(p)].data(), s, r);
      t->post(&s);
      t->post(&r);
      all.push_back(&s);
      all.push_back(&r);
    }
    drive(*t, all);
    for (int p = 0; p < size; ++p)
      EXPECT_EQ(in[size_t(p)][bytes - 1], uint8_t(p * 16 + rank)) << "from rank " << p;
    for (int it = 0; it < 300; ++it) {
      int to = (rank + 1 + it % 3) % size, from = (rank + size - 1 - it % 3) % size;
      uint32_t o = uint32_t(it), i = 99999;
      Request s, r;
      tutil::send_recv_pair(to, from, sig_of(CollOp::kBarrier, uint64_t(it + 1), 1, 4), &o, &i, s, r);
      t->post(&r);
      t->post(&s);
      drive(*t, {&s, &r});
      ASSERT_EQ(i, uint32_t(it));
    }
  }, 60s);
  expect_all_pass(2, [](int rank, int size, std::shared_ptr<Store> store) {
    ::setenv("BRAID_HOST_ID", rank == 0 ? "hostA" : "hostB", 1);
    try {
      make(rank, size, *store, "shm");
      ADD_FAILURE() << "shm mode accepted two hosts";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::kNotSupported) << e.what();
    }
  }, 30s);
}

// Hostile connections to a listener during set-up (wrong secret; right
// secret but a garbage hello; a connection that never speaks) are dropped,
// and the real peers still connect promptly.
TEST(Transport, TcpRejectsUninvitedConnections) {
  expect_all_pass(3, [](int rank, int size, std::shared_ptr<Store> store) {
    if (rank != 2) {
      uint64_t t0 = now_ns();
      auto t = make(rank, size, *store, "tcp");
      EXPECT_LT(double(now_ns() - t0) * 1e-9, 8.0) << "set-up was held up by hostile connections";
      tutil::ring_ping(*t, rank, size);
      return;
    }
    // Rank 2 attacks rank 0's listener before it connects itself (its store
    // view delays rank 0's address by a second).
    std::atomic<bool> attacked{false};
    std::thread attacker([&] {
      auto ps = make_prefix_store(store, tutil::kPrefix);
      std::string v = ps->get_str("tcp/addr/0");
      sockaddr_in sa{};
      sa.sin_family = AF_INET;
      sa.sin_port = htons(uint16_t(std::atoi(v.c_str() + v.find(' ') + 1)));
      ::inet_pton(AF_INET, v.substr(0, v.find(' ')).c_str(), &sa.sin_addr);
      auto dial = [&] {
        int fd = ::socket(AF_INET, SOCK_STREAM, 0);
        if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) ADD_FAILURE() << "connect failed";
        return fd;
      };
      int silent = dial();  // never speaks
      int fd = dial();
      try {
        authenticate_connect(fd, "not-the-secret", 5000ms);
        ADD_FAILURE() << "wrong secret accepted";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), Errc::kAuth) << e.what();
      }
      ::close(fd);
      fd = dial();
      authenticate_connect(fd, tutil::kSecret, 5000ms);
      char junk[48] = {0};
      write_full(fd, junk, sizeof junk, now_ns() + 1000000000ull, "junk hello");
      char ack[8];
      try {
        read_full(fd, ack, sizeof ack, now_ns() + 5000000000ull, "ack");
        ADD_FAILURE() << "garbage hello acknowledged";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), Errc::kPeerDied) << e.what();
      }
      ::close(fd);
      attacked = true;
      std::this_thread::sleep_for(1500ms);
      ::close(silent);
    });
    tutil::DelayedStore slow(store, "tcp/addr/0", 1000ms);
    auto t = make(rank, size, slow, "tcp");
    EXPECT_TRUE(attacked.load());
    tutil::ring_ping(*t, rank, size);
    attacker.join();
  }, 60s);
}

}  // namespace
}  // namespace braid::comm
