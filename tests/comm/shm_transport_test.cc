// Shared-memory transport tests: the opt-in single-copy path
// (process_vm_readv; see src/comm/transport/shm/shm_wire_cma.cc), with real processes
// (tests/support/multiproc.h). transport_test.cc covers shm and tcp alike.
#include <gtest/gtest.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstddef>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "braid/env.h"
#include "braid/error.h"
#include "comm/transport/shm/shm_wire.h"
#include "comm/transport/transport.h"
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

constexpr size_t kCmaBytes = 256u << 10;  // the threshold the tests set

// What a container's seccomp profile does: process_vm_readv fails (EPERM).
void block_process_vm_readv() {
  sock_filter f[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_readv, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog prog{uint16_t(sizeof f / sizeof f[0]), f};
  ASSERT_EQ(::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
  ASSERT_EQ(::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog), 0);
}

// A message from rank 0 to rank 1: rank 0 sends `sig` from `buf`, rank 1
// receives it into `buf`.
Request one_way(int rank, const MsgSig& sig, void* buf) {
  Request r;
  r.kind = rank == 0 ? Request::Kind::kSend : Request::Kind::kRecv;
  r.peer = 1 - rank;
  r.sig = sig;
  if (rank == 0) r.src = buf;
  else r.dst = buf;
  return r;
}

// on: BRAID_SHM_CMA_BYTES=256 KiB; off: =0; default: unset (off); blocked:
// on, but process_vm_readv is refused on odd ranks, so some directions fall
// back and others do not.
class ShmSingleCopy : public ::testing::TestWithParam<std::string> {
 protected:
  std::vector<std::string> env() const {
    if (GetParam() == "default") return {};
    return {"BRAID_SHM_CMA_BYTES=" + std::to_string(GetParam() == "off" ? 0 : kCmaBytes)};
  }
  void setup_rank(int rank) const {
    if (GetParam() == "default") ::unsetenv("BRAID_SHM_CMA_BYTES");
    if (GetParam() == "blocked" && rank % 2) block_process_vm_readv();
  }
};

// Messages on both sides of the threshold, odd sizes, small and empty ones
// in between (ordering across the fast boxes, the ring and single copy),
// and large kRecvReduce, all posted at once around a ring of three.
TEST_P(ShmSingleCopy, SizesAroundThresholdInOrder) {
  expect_all_pass(3, [this](int rank, int size, std::shared_ptr<Store> store) {
    setup_rank(rank);
    auto t = make(rank, size, *store, "shm");
    tutil::ring_ping(*t, rank, size);  // every probe has run
    const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    // Reductions into the mix: f32 sum (a count that is no multiple of any
    // piece) and f64 max in place.
    const size_t c32 = (3u << 18) + 3, c64 = (1u << 17) + 1;
    std::vector<float> mine32(c32), acc32(c32), dst32(c32, -1.f);
    std::vector<double> mine64(c64), acc64(c64), keep64(c64);
    for (size_t i = 0; i < c32; ++i) mine32[i] = float((rank * 7 + i) % 1000), acc32[i] = float(i % 777);
    for (size_t i = 0; i < c64; ++i) mine64[i] = double((rank * 5 + i) % 91), keep64[i] = acc64[i] = double(i % 50);
    Request rs[4];
    rs[0].kind = rs[2].kind = Request::Kind::kSend;
    rs[1].kind = rs[3].kind = Request::Kind::kRecvReduce;
    rs[0].peer = rs[2].peer = next;
    rs[1].peer = rs[3].peer = prev;
    rs[0].sig = rs[1].sig = sig_of(CollOp::kAllReduce, 50, c32, c32 * 4, DType::kF32);
    rs[2].sig = rs[3].sig = sig_of(CollOp::kReduceScatter, 51, c64, c64 * 8, DType::kF64, ReduceOp::kMax);
    rs[0].src = mine32.data();
    rs[1].dst = dst32.data(), rs[1].acc = acc32.data(), rs[1].dtype = DType::kF32;
    rs[2].src = mine64.data();
    rs[3].dst = acc64.data(), rs[3].acc = acc64.data(), rs[3].dtype = DType::kF64, rs[3].rop = ReduceOp::kMax;
    ring_exchange(*t, rank, size,
                  {kCmaBytes - 1, kCmaBytes, 8, kCmaBytes + 1, (9u << 20) + 5, 300, 0, 1u << 20,
                   shm::kFastBytes, shm::kFastBytes + 1, 3u << 20, 1},
                  CollOp::kAllToAll, {&rs[0], &rs[1], &rs[2], &rs[3]});
    for (size_t i = 0; i < c32; ++i)
      if (dst32[i] != acc32[i] + float((prev * 7 + i) % 1000)) {
        ADD_FAILURE() << "f32 sum wrong at " << i << ": " << dst32[i];
        break;
      }
    for (size_t i = 0; i < c64; ++i)
      if (acc64[i] != std::max(keep64[i], double((prev * 5 + i) % 91))) {
        ADD_FAILURE() << "f64 max wrong at " << i << ": " << acc64[i];
        break;
      }
  }, 60s, env());
}

// Which path carried a message, seen from outside: the sender posts it,
// lets the transport run, then overwrites its buffer (which a real caller
// must not do) before the receiver posts. The slot ring has copied the
// original by then; a single-copy receiver reads the overwritten bytes.
// Returns, on rank 1, whether it got the overwritten bytes.
bool read_after_post(Transport& t, int rank, Store& store, size_t bytes, const std::string& tag) {
  std::vector<uint8_t> buf(bytes, 1);
  Request r = one_way(rank, sig_of(CollOp::kBroadcast, 3, bytes, bytes), buf.data());
  if (rank == 0) {
    t.post(&r);
    for (int i = 0; i < 1000; ++i) t.progress();
    std::memset(buf.data(), 2, bytes);
    store.set_str("overwritten/" + tag, "1");
    drive(t, {&r});
    // The next probe must find the ring empty: a send completes once its
    // slots are written, and a receiver still reading this one would leave
    // the next one too few slots to leave whole before the overwrite.
    store.get("read/" + tag);
    return false;
  }
  store.get("overwritten/" + tag);
  std::memset(buf.data(), 0, bytes);
  t.post(&r);
  drive(t, {&r});
  store.set_str("read/" + tag, "1");
  for (size_t i = 0; i < bytes; ++i)
    if (buf[i] != buf[0]) ADD_FAILURE() << tag << ": mixed bytes at " << i;
  return buf[0] == 2;
}

TEST_P(ShmSingleCopy, UsedExactlyFromThreshold) {
  expect_all_pass(2, [this](int rank, int size, std::shared_ptr<Store> store) {
    setup_rank(rank);
    auto t = make(rank, size, *store, "shm");
    tutil::ring_ping(*t, rank, size);
    const bool on = GetParam() == "on";
    const bool below = read_after_post(*t, rank, *store, kCmaBytes - 1, "below");
    const bool at = read_after_post(*t, rank, *store, kCmaBytes, "at");
    const bool big = read_after_post(*t, rank, *store, (2u << 20) + 3, "big");
    if (rank == 1) {
      EXPECT_FALSE(below);
      EXPECT_EQ(at, on);
      EXPECT_EQ(big, on);
    }
  }, 30s, env());
}

// The all-gather / all-to-all pattern: both ranks post many 1 MiB sends
// first, then the receives, so each waits for the other to read it; plus
// one 64 MiB message each way. Neither may wait for the other to go first.
TEST_P(ShmSingleCopy, BothWaysAtOnceDoesNotDeadlock) {
  expect_all_pass(2, [this](int rank, int size, std::shared_ptr<Store> store) {
    setup_rank(rank);
    auto t = make(rank, size, *store, "shm");
    const size_t chunk = 1u << 20, nchunks = 48, big = (64u << 20) + 8;
    std::vector<uint8_t> out(nchunks * chunk + big), in(out.size(), 0);
    for (size_t i = 0; i < out.size(); i += 4096) out[i] = uint8_t(rank * 100 + i / 4096);
    std::vector<Request> reqs(2 * (nchunks + 1));
    std::vector<Request*> all;
    for (size_t k = 0; k <= nchunks; ++k) {
      const size_t off = k * chunk, len = k < nchunks ? chunk : big;
      Request& s = reqs[2 * k];
      Request& r = reqs[2 * k + 1];
      tutil::send_recv_pair(1 - rank, 1 - rank,
                            sig_of(CollOp::kAllGather, 9, nchunks, len, DType::kU8, ReduceOp::kSum, int32_t(k)),
                            out.data() + off, in.data() + off, s, r);
      t->post(&s);
      all.push_back(&s);
    }
    for (size_t k = 0; k <= nchunks; ++k) t->post(&reqs[2 * k + 1]), all.push_back(&reqs[2 * k + 1]);
    drive(*t, all, 30s);
    for (size_t i = 0; i < in.size(); i += 4096)
      if (in[i] != uint8_t((1 - rank) * 100 + i / 4096)) {
        ADD_FAILURE() << "byte " << i << " differs";
        break;
      }
  }, 60s, env());
}

INSTANTIATE_TEST_SUITE_P(All, ShmSingleCopy, ::testing::Values("on", "off", "default", "blocked"));

const std::vector<std::string> kCmaOn = {"BRAID_SHM_CMA_BYTES=" + std::to_string(kCmaBytes)};

// A single-copy message the receiver does not expect: kMismatch with both
// sides before any byte lands in the receiver's buffer.
TEST(ShmSingleCopyFaults, MismatchBeforeAnyByteMoves) {
  expect_all_pass(2, [](int rank, int size, std::shared_ptr<Store> store) {
    auto t = make(rank, size, *store, "shm");
    tutil::ring_ping(*t, rank, size);
    std::vector<uint8_t> buf(4u << 20, rank == 0 ? 1 : 0xEE);
    // rank 0 sends seq 4, rank 1 expects seq 5
    Request r = one_way(rank, sig_of(CollOp::kAllGather, rank == 0 ? 4 : 5, buf.size() / 4, buf.size(), DType::kF32),
                        buf.data());
    t->post(&r);
    if (rank == 0) {
      for (int i = 0; i < 100; ++i) t->progress();  // the descriptor is out
      store->get("mismatch_seen");  // stay alive until rank 1 has read it
      return;
    }
    tutil::expect_error(*t, {&r}, Errc::kMismatch,
                        {"rank 1 expected all_gather seq 5 count 1048576 f32",
                         "sent all_gather seq 4 count 1048576 f32", "rank 0 (pid"},
                        "no mismatch detected");
    EXPECT_EQ(r.done, 0u);
    for (size_t i = 0; i < buf.size(); ++i)
      if (buf[i] != 0xEE) {
        ADD_FAILURE() << "byte " << i << " was written";
        break;
      }
    store->set_str("mismatch_seen", "1");
  }, 30s, kCmaOn);
}

// The sender exits while the receiver is half way through reading it:
// kPeerDied naming the sender, promptly.
TEST(ShmSingleCopyFaults, SenderDiesMidTransfer) {
  expect_all_pass(2, [](int rank, int size, std::shared_ptr<Store> store) {
    auto t = make(rank, size, *store, "shm");
    tutil::ring_ping(*t, rank, size);
    std::vector<uint8_t> buf(64u << 20, 1);
    Request r = one_way(rank, sig_of(CollOp::kScatter, 2, buf.size(), buf.size()), buf.data());
    t->post(&r);
    if (rank == 0) {
      while (!store->check("reading")) t->progress(), std::this_thread::sleep_for(1ms);
      ::_exit(0);
    }
    while (r.done == 0) t->progress();
    ASSERT_LT(r.done, buf.size());
    store->set_str("reading", "1");
    std::this_thread::sleep_for(300ms);  // the sender exits meanwhile
    uint64_t t0 = now_ns();
    try {
      drive(*t, {&r}, 20s);
      ADD_FAILURE() << "read from an exited sender completed";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::kPeerDied) << e.what();
      EXPECT_NE(std::string(e.what()).find("peer rank 0 (pid"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("receiving scatter seq 2"), std::string::npos) << e.what();
      EXPECT_LT(double(now_ns() - t0) * 1e-9, 5.0) << e.what();
    }
  }, 30s, kCmaOn);
}

// A source buffer that is gone (EFAULT) is an Error naming the peer and
// the message, not a crash.
TEST(ShmSingleCopyFaults, UnmappedSourceIsAnError) {
  expect_all_pass(2, [](int rank, int size, std::shared_ptr<Store> store) {
    auto t = make(rank, size, *store, "shm");
    tutil::ring_ping(*t, rank, size);
    const size_t bytes = 4u << 20;
    const MsgSig sig = sig_of(CollOp::kGather, 6, bytes, bytes);
    if (rank == 0) {
      void* m = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      ASSERT_NE(m, MAP_FAILED);
      Request r = one_way(rank, sig, m);
      t->post(&r);
      for (int i = 0; i < 100; ++i) t->progress();  // the descriptor is out
      ::munmap(m, bytes);
      store->set_str("unmapped", "1");
      store->get("seen");
      return;
    }
    std::vector<uint8_t> buf(bytes);
    Request r = one_way(rank, sig, buf.data());
    store->get("unmapped");
    t->post(&r);
    tutil::expect_error(*t, {&r}, Errc::kIo, {"single-copy read of gather seq 6", "rank 0 (pid", "Bad address"},
                        "read from an unmapped buffer completed");
    store->set_str("seen", "1");
  }, 30s, kCmaOn);
}


// Waking a sleeping receiver (ShmWire::publish). Rank 1 sleeps as soon as
// its quick polls find nothing (BRAID_SPIN_US=0); rank 0 sends after a
// varying pause of 0-5 µs, so its publish lands before, during and after
// rank 1's fall asleep, and each side waits with a 2 s timeout, so a wake-up
// lost between the publish and the sleeper's re-check costs the full 50 ms
// sleep slice. Counted: round trips of 40 ms or more, unless either rank
// spent 5 ms of that round waiting for a core (a busy machine, not a lost
// wake-up; from /proc/thread-self/schedstat). With plain-store publishes
// (the default) and with seq_cst ones (BRAID_SHM_LIGHT_PUBLISH=0).
class ShmWake : public ::testing::TestWithParam<std::string> {};

TEST_P(ShmWake, SleepingReceiverWakesAtOnce) {
  const std::vector<std::string> env = {"BRAID_SPIN_US=0", "BRAID_SHM_LIGHT_PUBLISH=" + GetParam()};
  expect_all_pass(2, [](int rank, int size, std::shared_ptr<Store> store) {
    auto t = make(rank, size, *store, "shm");
    auto finish = [&](Request& r) {
      while (!r.complete)
        if (!t->progress()) t->wait_activity(std::chrono::seconds(2));
    };
    auto voluntary_switches = [] {
      std::ifstream f("/proc/self/status");
      std::string line;
      while (std::getline(f, line))
        if (line.rfind("voluntary_ctxt_switches:", 0) == 0) return std::stol(line.substr(24));
      return -1L;
    };
    ASSERT_GE(thread_run_delay_ns(), 0) << "no /proc/thread-self/schedstat";
    const long sw0 = voluntary_switches();
    constexpr int kRounds = 60000;
    std::vector<int> slow, starved;
    uint64_t worst = 0, x = 12345;
    int64_t delay0 = thread_run_delay_ns();
    for (int i = 0; i < kRounds; ++i) {
      uint64_t v = uint64_t(i), got = 0;
      Request s, r;
      tutil::send_recv_pair(1 - rank, 1 - rank, sig_of(CollOp::kSend, uint64_t(i), 1, 8), &v, &got, s, r);
      const uint64_t t0 = now_ns();
      if (rank == 0) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        const uint64_t until = t0 + (x >> 33) % 20'000;
        while (now_ns() < until) cpu_relax();
        t->post(&s);
        t->post(&r);
        finish(s);
        finish(r);
      } else {
        t->post(&r);
        finish(r);
        t->post(&s);
        finish(s);
      }
      ASSERT_EQ(got, uint64_t(i));
      const uint64_t dt = now_ns() - t0;
      const int64_t delay = thread_run_delay_ns();
      worst = std::max(worst, dt);
      if (dt >= 40'000'000) slow.push_back(i);
      if (delay - delay0 >= 5'000'000) starved.push_back(i);
      delay0 = delay;
    }
    // The receiver did fall asleep (a futex wait is a voluntary switch) in
    // a good share of the rounds, or this tested nothing.
    if (rank == 1) {
      EXPECT_GE(voluntary_switches() - sw0, kRounds / 5);
    }
    std::string mine;
    for (int i : starved) mine += std::to_string(i) + " ";
    store->set_str("starved/" + std::to_string(rank), mine);
    store->wait({"starved/" + std::to_string(1 - rank)}, 30s);
    std::istringstream theirs(store->get_str("starved/" + std::to_string(1 - rank)));
    for (int i; theirs >> i;) starved.push_back(i);
    int stalls = 0;
    for (int i : slow) stalls += std::find(starved.begin(), starved.end(), i) == starved.end();
    EXPECT_EQ(stalls, 0) << "rank " << rank << ": " << stalls << " of " << kRounds
                         << " round trips took 40 ms or more with both ranks on a core (worst "
                         << worst / 1000 << " µs)";
  }, 60s, env);
}

INSTANTIATE_TEST_SUITE_P(LightPublish, ShmWake, ::testing::Values("1", "0"));

}  // namespace
}  // namespace braid::comm
