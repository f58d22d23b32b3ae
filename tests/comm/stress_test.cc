// Random sequences of operations against a serial reference: collectives
// and tagged send/recv, issued asynchronously a few at a time on the world
// and on a sub-communicator, with random counts across the transports'
// thresholds (fast boxes, slots, chunking), random algorithms, dtypes,
// reduce ops, in-place and out-of-place buffers, and random pauses so that
// the ranks drift apart. Every result is checked; integer-valued inputs make
// every reduction exact, so results are compared bit for bit (avg on floats:
// within one rounding).
//
// Every rank draws the same sequence from the same seed; pauses come from a
// per-rank generator. BRAID_STRESS_OPS (operations per job, default 240) and
// BRAID_STRESS_SEED (default 1) make longer soaks:
//   BRAID_STRESS_OPS=20000 BRAID_STRESS_SEED=7 build/comm_stress_test
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "braid/comm.h"
#include "braid/env.h"
#include "braid/reduce.h"
#include "support/multiproc.h"

using namespace braid;

namespace {

enum class Op {
  kAllReduce, kReduce, kBroadcast, kAllGather, kReduceScatter, kGather, kScatter, kAllToAll,
  kAllToAllV, kSendRecv, kBarrier, kCount
};
const char* op_name(Op o) {
  static const char* names[] = {"all_reduce", "reduce", "broadcast", "all_gather",
                                "reduce_scatter", "gather", "scatter", "all_to_all",
                                "all_to_all_v", "send_recv", "barrier"};
  return names[int(o)];
}

// One element's value: small integers, so sums, products (of ±1 and 2) and
// min/max are exact in every dtype; u8 is kept non-negative.
double value(uint64_t salt, int rank, size_t i, ReduceOp rop, DType t) {
  uint64_t h = (salt + 0x9E3779B97F4A7C15ull * uint64_t(rank + 1)) ^ (i * 0xBF58476D1CE4E5B9ull);
  h ^= h >> 31;
  h *= 0x94D049BB133111EBull;
  h ^= h >> 29;
  if (rop == ReduceOp::kProd) return h % 11 == 0 ? 2.0 : (t == DType::kU8 || (h & 1)) ? 1.0 : -1.0;
  double v = double(int(h % 5) - 2);
  return t == DType::kU8 ? v + 2 : v;
}

// Elements [first, first + count) of `rank`'s input stream `salt`.
void fill(uint8_t* dst, size_t count, DType t, ReduceOp rop, uint64_t salt, int rank,
          size_t first = 0) {
  const size_t es = dtype_size(t);
  for (size_t i = 0; i < count; ++i) dtype_store(dst + i * es, t, value(salt, rank, first + i, rop, t));
}

// The reduction of elements [first, first + count) over ranks 0..n-1, folded
// in rank order with the library's kernels.
std::vector<uint8_t> reduced(size_t count, DType t, ReduceOp rop, uint64_t salt, int n,
                             size_t first) {
  const size_t es = dtype_size(t);
  std::vector<uint8_t> acc(count * es), cur(count * es);
  fill(acc.data(), count, t, rop, salt, 0, first);
  for (int r = 1; r < n; ++r) {
    fill(cur.data(), count, t, rop, salt, r, first);
    reduce2(acc.data(), acc.data(), cur.data(), count, t, rop);
  }
  if (rop == ReduceOp::kAvg) scale_avg(acc.data(), count, t, n);
  return acc;
}

// One operation of a batch: its parameters, buffers and expected output.
struct Pending {
  std::string what;
  Op op = Op::kBarrier;
  DType t = DType::kF32;
  ReduceOp rop = ReduceOp::kSum;
  std::vector<uint8_t> in, out, want;
  uint8_t* result = nullptr;  // where the checked bytes are (out, in, or a shared buffer)
  size_t result_bytes = 0;    // 0: nothing to check on this rank
  std::vector<Work> works;
};

struct Params {
  int ops = 240;
  uint64_t seed = 1;
};

Params params() {
  Params p;
  if (auto v = env_str("BRAID_STRESS_OPS")) p.ops = std::stoi(*v);
  if (auto v = env_str("BRAID_STRESS_SEED")) p.seed = std::stoull(*v);
  return p;
}

size_t draw_count(std::mt19937_64& g) {
  switch (g() % 10) {
    case 0: return 0;
    case 1: return 1 + g() % 8;
    case 2: case 3: return 1 + g() % 512;           // fast boxes
    case 4: case 5: return 512 + g() % 8192;        // one or a few slots' worth
    case 6: case 7: return 8192 + g() % 200000;     // several slots, chunked
    case 8: return 200000 + g() % 600000;           // many chunks
    default: return (size_t(1) << (g() % 20)) + (g() % 3);  // powers of two ± a little
  }
}

const char* pick(std::mt19937_64& g, std::initializer_list<const char*> xs) {
  return *(xs.begin() + g() % xs.size());
}

// Issues one random operation on `c` (async), recording what to expect.
void issue(Communicator& c, std::mt19937_64& g, uint64_t salt, Pending& p, bool sub,
           SharedBuffer* shared, bool deviate = false) {
  const int n = c.size(), r = c.rank();
  p.op = Op(g() % int(Op::kCount));
  do {
    p.t = DType(g() % kNumDTypes);
    p.rop = ReduceOp(g() % kNumReduceOps);
  } while (!reduce_op_supported(p.rop, p.t));
  const size_t count = draw_count(g) + (deviate ? 1 : 0);
  const int root_draw = int(g() % 64);
  const bool in_place = g() % 3 == 0;
  const bool use_shared = shared && !sub && g() % 4 == 0;
  const uint32_t tag = uint32_t(g() % 5);
  const int shift = 1 + int(g() % 7);
  const DType t = p.t;
  const ReduceOp rop = p.rop;
  const size_t es = dtype_size(t);
  const int root = root_draw % n;
  std::string algo = "auto";
  switch (p.op) {
    case Op::kAllReduce: {
      // Those that can run here: "hier" needs a host hierarchy, "chain" shared memory.
      std::vector<std::string> xs = c.algorithms("all_reduce");
      xs.push_back("auto");
      algo = xs[g() % xs.size()];
      break;
    }
    case Op::kReduce: algo = pick(g, {"tree", "ring", "direct", "auto"}); break;
    case Op::kBroadcast: algo = pick(g, {"tree", "chain", "auto"}); break;
    case Op::kAllGather: case Op::kReduceScatter: algo = pick(g, {"ring", "direct", "auto"}); break;
    default: break;
  }
  std::ostringstream os;
  os << (sub ? "sub " : "world ") << op_name(p.op) << " " << algo << " " << dtype_name(t) << " "
     << reduce_op_name(rop) << " count " << count << (in_place ? " in-place" : "")
     << (use_shared ? " shared" : "") << " root " << root << " (n " << n << ", rank " << r << ")";
  p.what = os.str();
  if (p.op == Op::kAllReduce || p.op == Op::kReduce || p.op == Op::kBroadcast ||
      p.op == Op::kAllGather || p.op == Op::kReduceScatter)
    c.set_algorithm(op_name(p.op), algo);

  auto expect_here = [&](uint8_t* where, size_t bytes) {
    p.result = where;
    p.result_bytes = bytes;
  };
  // A destination: the shared buffer when asked for and large enough.
  auto dest = [&](size_t bytes) -> uint8_t* {
    if (use_shared && bytes <= shared->bytes()) {
      std::memset(shared->data(), 0xAB, bytes);
      return static_cast<uint8_t*>(shared->data());
    }
    p.out.assign(bytes, 0xAB);
    return p.out.data();
  };

  switch (p.op) {
    case Op::kAllReduce: {
      p.in.resize(count * es);
      fill(p.in.data(), count, t, rop, salt, r);
      p.want = reduced(count, t, rop, salt, n, 0);
      uint8_t* out = dest(count * es);
      if (in_place && count) std::memcpy(out, p.in.data(), count * es);
      p.works.push_back(c.all_reduce_async(in_place ? out : p.in.data(), out, count, t, rop));
      expect_here(out, count * es);
      break;
    }
    case Op::kReduce: {
      p.in.resize(count * es);
      fill(p.in.data(), count, t, rop, salt, r);
      p.out.assign(count * es, 0xAB);
      uint8_t* out = in_place && r == root ? p.in.data() : p.out.data();
      p.works.push_back(c.reduce_async(p.in.data(), out, count, t, rop, root));
      if (r == root) {
        p.want = reduced(count, t, rop, salt, n, 0);
        expect_here(out, count * es);
      }
      break;
    }
    case Op::kBroadcast: {
      p.want.resize(count * es);
      fill(p.want.data(), count, t, rop, salt, root);
      uint8_t* buf = dest(count * es);
      if (r == root && count) std::memcpy(buf, p.want.data(), count * es);
      p.works.push_back(c.broadcast_async(buf, count, t, root));
      expect_here(buf, count * es);
      break;
    }
    case Op::kAllGather: {
      p.want.resize(count * n * es);
      for (int j = 0; j < n; ++j) fill(p.want.data() + j * count * es, count, t, rop, salt, j);
      uint8_t* out = dest(count * n * es);
      const uint8_t* in;
      if (in_place) {
        fill(out + r * count * es, count, t, rop, salt, r);
        in = out + r * count * es;
      } else {
        p.in.resize(count * es);
        fill(p.in.data(), count, t, rop, salt, r);
        in = p.in.data();
      }
      p.works.push_back(c.all_gather_async(in, out, count, t));
      expect_here(out, count * n * es);
      break;
    }
    case Op::kReduceScatter: {
      p.in.resize(count * n * es);
      fill(p.in.data(), count * n, t, rop, salt, r);
      p.want = reduced(count, t, rop, salt, n, size_t(r) * count);
      uint8_t* out = dest(count * es);
      p.works.push_back(c.reduce_scatter_async(p.in.data(), out, count, t, rop));
      expect_here(out, count * es);
      break;
    }
    case Op::kGather: {
      p.in.resize(count * es);
      fill(p.in.data(), count, t, rop, salt, r);
      p.out.assign(r == root ? count * n * es : 0, 0xAB);
      p.works.push_back(c.gather_async(p.in.data(), r == root ? p.out.data() : nullptr, count, t, root));
      if (r == root) {
        p.want.resize(count * n * es);
        for (int j = 0; j < n; ++j) fill(p.want.data() + j * count * es, count, t, rop, salt, j);
        expect_here(p.out.data(), count * n * es);
      }
      break;
    }
    case Op::kScatter: {
      if (r == root) {
        p.in.resize(count * n * es);
        fill(p.in.data(), count * n, t, rop, salt, root);
      }
      p.out.assign(count * es, 0xAB);
      p.works.push_back(c.scatter_async(r == root ? p.in.data() : nullptr, p.out.data(), count, t, root));
      p.want.resize(count * es);
      fill(p.want.data(), count, t, rop, salt, root, size_t(r) * count);
      expect_here(p.out.data(), count * es);
      break;
    }
    case Op::kAllToAll: {
      const size_t c1 = std::min<size_t>(count, 300000);
      p.in.resize(c1 * n * es);
      fill(p.in.data(), c1 * n, t, rop, salt, r);
      p.out.assign(c1 * n * es, 0xAB);
      p.works.push_back(c.all_to_all_async(p.in.data(), p.out.data(), c1, t));
      p.want.resize(c1 * n * es);
      for (int j = 0; j < n; ++j)
        fill(p.want.data() + j * c1 * es, c1, t, rop, salt, j, size_t(r) * c1);
      expect_here(p.out.data(), c1 * n * es);
      break;
    }
    case Op::kAllToAllV: {
      // rank i sends cnt(i, j) elements to rank j, starting at element
      // off(i, j) of its stream
      auto cnt = [&](int i, int j) {
        return size_t((uint64_t(i * 31 + j * 17) * 2654435761u + salt) % (count / 4 + 3));
      };
      std::vector<size_t> sc(n), sd(n), rc(n), rd(n);
      size_t st = 0, rt = 0;
      for (int j = 0; j < n; ++j) {
        sc[j] = cnt(r, j), sd[j] = st, st += sc[j];
        rc[j] = cnt(j, r), rd[j] = rt, rt += rc[j];
      }
      p.in.resize(st * es);
      fill(p.in.data(), st, t, rop, salt, r);
      p.out.assign(rt * es, 0xAB);
      p.want.resize(rt * es);
      for (int j = 0; j < n; ++j) {
        size_t off = 0;  // where rank j's block for r starts in j's stream
        for (int k = 0; k < r; ++k) off += cnt(j, k);
        fill(p.want.data() + rd[j] * es, rc[j], t, rop, salt, j, off);
      }
      // a blocking call, made from this thread: it waits its turn behind
      // the batch's earlier asynchronous operations
      c.all_to_all_v(p.in.data(), sc, sd, p.out.data(), rc, rd, t);
      expect_here(p.out.data(), rt * es);
      break;
    }
    case Op::kSendRecv: {
      // every rank sends to r + shift and receives from r − shift
      const int s = n > 1 ? 1 + (shift - 1) % (n - 1) : 0;  // never this rank
      const int to = (r + s) % n, from = (r - s + n) % n;
      p.in.resize(count * es);
      fill(p.in.data(), count, t, rop, salt, r);
      p.out.assign(count * es, 0xAB);
      p.want.resize(count * es);
      fill(p.want.data(), count, t, rop, salt, from);
      if (n == 1) {
        std::memcpy(p.out.data(), p.in.data(), count * es);
      } else {
        p.works.push_back(c.recv_async(p.out.data(), count, t, from, tag));
        p.works.push_back(c.send_async(p.in.data(), count, t, to, tag));
      }
      expect_here(p.out.data(), count * es);
      break;
    }
    case Op::kBarrier:
    case Op::kCount:
      p.works.push_back(c.barrier_async());
      break;
  }
}

size_t check(Pending& p) {
  for (auto& w : p.works) w.wait();
  if (p.result_bytes == 0) return 0;
  if (p.result_bytes != p.want.size()) {
    ADD_FAILURE() << p.what << ": expected " << p.want.size() << " bytes, checked "
                  << p.result_bytes;
    return 1;
  }
  const size_t es = dtype_size(p.t), count = p.result_bytes / es;
  size_t bad = 0;
  for (size_t i = 0; i < count; ++i) {
    const uint8_t *a = p.result + i * es, *b = p.want.data() + i * es;
    if (std::memcmp(a, b, es) == 0) continue;
    if (p.rop == ReduceOp::kAvg && dtype_is_float(p.t)) {
      double x = dtype_load(a, p.t), y = dtype_load(b, p.t);
      double tol = (p.t == DType::kF32 || p.t == DType::kF64) ? 1e-6 : 1e-2;
      if (std::fabs(x - y) <= tol * std::max(1.0, std::fabs(y))) continue;
    }
    if (bad++ == 0)
      ADD_FAILURE() << p.what << ": element " << i << " of " << count << " is " << dtype_load(a, p.t)
                    << ", expected " << dtype_load(b, p.t);
  }
  return bad;
}

// A rank to kill (SIGKILL, no goodbye) once `after` operations are issued;
// it first writes the time (CLOCK_MONOTONIC ns) to `stamp`.
struct Victim {
  int rank = -1;
  int after = 0;
  std::string stamp;
  bool mismatch = false;  // instead of dying, pass a different count from then on
};

void run_stream(int rank, int size, std::shared_ptr<Store> store, const Victim& victim,
                bool two_hosts = false) {
  const Params prm = params();
  // Two pretend hosts, ranks interleaved: TCP between them, shared memory
  // within, and the hierarchical all-reduce.
  if (two_hosts) ::setenv("BRAID_HOSTNAME", rank % 2 == 0 ? "stress_a" : "stress_b", 1);
  auto world = braid::testing::make_comm(rank, size, store, 60);
  auto sub = world->split(rank % 2, rank);
  ASSERT_NE(sub, nullptr);
  SharedBuffer shared = world->alloc_shared(4 << 20);
  std::mt19937_64 g(prm.seed);                       // the same on every rank
  std::mt19937_64 mine(prm.seed * 1000 + uint64_t(rank));  // pauses: this rank's own
  size_t wrong = 0;
  for (int done = 0, batch = 0; done < prm.ops && wrong == 0; ++batch) {
    const int k = 1 + int(g() % 4);
    // Sometimes the sub-communicator's operations are issued from a second
    // thread while this one issues the world's (each communicator is used by
    // one thread at a time, as the API asks).
    const bool threaded = g() % 4 == 0;
    std::vector<Pending> ps(static_cast<size_t>(k));
    // Buffers of async work stay valid until the Work completes (comm.h):
    // when a wait or an issue throws (the failure tests), every work still
    // pending is waited, its error dropped, before `ps` frees its buffers.
    struct WaitAll {
      std::vector<Pending>& ps;
      ~WaitAll() {
        for (Pending& p : ps)
          for (Work& w : p.works) try {
              if (w.valid()) w.wait();
            } catch (...) {
            }
      }
    } wait_all{ps};
    std::vector<bool> on_sub(static_cast<size_t>(k));
    std::vector<uint64_t> seeds(static_cast<size_t>(k));
    for (int i = 0; i < k; ++i) {
      on_sub[size_t(i)] = g() % 3 == 0;
      seeds[size_t(i)] = g();
    }
    auto issue_some = [&](bool subs, std::mt19937_64& pause) {
      for (int i = 0; i < k; ++i) {
        if (threaded && on_sub[size_t(i)] != subs) continue;
        if (pause() % 4 == 0) std::this_thread::sleep_for(std::chrono::microseconds(pause() % 300));
        std::mt19937_64 og(seeds[size_t(i)]);
        const uint64_t salt = og();
        const bool deviate =
            victim.mismatch && rank == victim.rank && done + i >= victim.after;
        if (deviate && victim.after == done + i) std::ofstream(victim.stamp) << now_ns();
        // only the batch's first operation may use the shared buffer
        issue(on_sub[size_t(i)] ? *sub : *world, og, salt, ps[size_t(i)], on_sub[size_t(i)],
              i == 0 ? &shared : nullptr, deviate);
        ps[size_t(i)].what = "batch " + std::to_string(batch) + " op " + std::to_string(i) +
                             (threaded ? " (threaded)" : "") + ": " + ps[size_t(i)].what;
      }
    };
    if (threaded) {
      std::mt19937_64 pause2(mine());
      std::exception_ptr failed[2];
      std::thread t([&] {
        try {
          issue_some(true, pause2);
        } catch (...) {
          failed[1] = std::current_exception();
        }
      });
      try {
        issue_some(false, mine);
      } catch (...) {
        failed[0] = std::current_exception();
      }
      t.join();
      for (auto& f : failed)
        if (f) std::rethrow_exception(f);
    } else {
      issue_some(false, mine);
    }
    done += k;
    if (rank == victim.rank && done >= victim.after && !victim.mismatch) {
      std::ofstream(victim.stamp) << now_ns();
      ::kill(::getpid(), SIGKILL);
    }
    // waited in a random order
    std::vector<int> order(static_cast<size_t>(k));
    for (int i = 0; i < k; ++i) order[size_t(i)] = i;
    std::shuffle(order.begin(), order.end(), g);
    for (int i : order) wrong += check(ps[size_t(i)]);
  }
  EXPECT_EQ(wrong, 0u);
  world->barrier();
}

void body(int rank, int size, std::shared_ptr<Store> store) {
  run_stream(rank, size, std::move(store), Victim{});
}

}  // namespace

TEST(Stress, RandomOperationsWorld3) { braid::testing::expect_all_pass(3, body, std::chrono::seconds(300)); }
TEST(Stress, RandomOperationsWorld4) { braid::testing::expect_all_pass(4, body, std::chrono::seconds(300)); }
TEST(Stress, RandomOperationsWorld5Tcp) {
  braid::testing::expect_all_pass(5, body, std::chrono::seconds(300), {"BRAID_TRANSPORT=tcp"});
}
TEST(Stress, RandomOperationsTwoPretendHosts) {
  braid::testing::expect_all_pass(4, [](int rank, int size, std::shared_ptr<Store> store) {
    run_stream(rank, size, std::move(store), Victim{}, true);
  }, std::chrono::seconds(300));
}
TEST(Stress, RandomOperationsWorld8) { braid::testing::expect_all_pass(8, body, std::chrono::seconds(300)); }

// A rank killed in the middle of the stream, with asynchronous operations
// in flight on the world and on a sub-communicator, some of them issued from
// a second thread: every other rank's pending or next operation fails within
// a few seconds (the operation deadline is 60 s), and the failures name the
// dead rank.
TEST(Stress, KilledRankFailsEveryOtherRankQuickly) {
  const std::string dir = braid::testing::temp_dir("stress_kill");
  for (int victim : {2, 0}) {
    const std::string stamp = dir + "/killed_" + std::to_string(victim);
    auto res = braid::testing::run_ranks(4, [&](int rank, int size, std::shared_ptr<Store> store) {
      try {
        run_stream(rank, size, store, Victim{victim, 60, stamp});
        ADD_FAILURE() << "rank " << rank << " finished its stream although rank " << victim
                      << " was killed";
      } catch (const Error& e) {
        std::ifstream f(stamp);
        uint64_t killed = 0;
        ASSERT_TRUE(f >> killed) << "failed before the kill: " << e.what();
        const double after_s = double(now_ns() - killed) / 1e9;
        EXPECT_LT(after_s, 10.0) << e.what();
        std::ofstream(dir + "/msg_" + std::to_string(victim) + "_" + std::to_string(rank))
            << e.what();
      }
    }, std::chrono::seconds(120), {"BRAID_STRESS_OPS=100000"});
    // Every survivor's error names the dead process: by its world rank, or
    // in a split by its rank there and its world rank.
    const std::string v = std::to_string(victim);
    for (auto& r : res) {
      if (r.rank == victim) {
        EXPECT_EQ(r.signal, SIGKILL) << "victim " << victim << ": " << r.output;
        continue;
      }
      EXPECT_EQ(r.exit_code, 0) << "rank " << r.rank << " (victim " << victim << "): " << r.output;
      std::ifstream f(dir + "/msg_" + v + "_" + std::to_string(r.rank));
      std::string msg((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      EXPECT_TRUE(msg.find("peer rank " + v + " (pid ") != std::string::npos ||
                  msg.find("(world rank " + v + ", pid ") != std::string::npos)
          << "rank " << r.rank << "'s error does not name the killed rank " << victim << ": " << msg;
    }
  }
}

// A rank that starts passing a different count in the middle of the stream
// (one element more, on whatever it calls next): every rank's operations,
// on the world and on the split, fail within moments, though every process
// stays alive (the failure travels through the communicators, not as a
// process exit), and some error shows both sides' counts.
TEST(Stress, MismatchMidStreamFailsEveryRankQuickly) {
  const std::string dir = braid::testing::temp_dir("stress_mismatch");
  for (const char* transport : {"shm", "tcp"}) {
    const std::string stamp = dir + "/deviated_" + transport;
    auto res = braid::testing::run_ranks(4, [&](int rank, int size, std::shared_ptr<Store> store) {
      try {
        run_stream(rank, size, store, Victim{1, 50, stamp, true});
        ADD_FAILURE() << "rank " << rank << " finished its stream although rank 1 deviated";
      } catch (const Error& e) {
        std::ifstream f(stamp);
        uint64_t since = 0;
        ASSERT_TRUE(f >> since) << "failed before the deviation: " << e.what();
        const double after_s = double(now_ns() - since) / 1e9;
        EXPECT_LT(after_s, 3.0) << transport << ": " << e.what();
        std::ofstream(dir + "/msg_" + transport + std::to_string(rank)) << e.what();
        // Stay alive for longer than that: the others must not be learning
        // of the failure from this process exiting.
        std::this_thread::sleep_for(std::chrono::seconds(4));
      }
    }, std::chrono::seconds(120), {"BRAID_STRESS_OPS=100000", std::string("BRAID_TRANSPORT=") + transport});
    int both = 0;
    for (auto& r : res) {
      EXPECT_EQ(r.exit_code, 0) << transport << " rank " << r.rank << ": " << r.output;
      std::ifstream f(dir + "/msg_" + transport + std::to_string(r.rank));
      std::string msg((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      if (msg.find("expected") != std::string::npos && msg.find("sent") != std::string::npos) ++both;
    }
    EXPECT_GE(both, 1) << transport << ": no rank's error shows both sides";
  }
}
