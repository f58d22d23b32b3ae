// Every collective × dtype × reduce op × count × algorithm against a serial
// reference, one multi-process job per world size (real processes, the real
// shared-memory transport; TCP runs a smaller matrix in comm_faults_test).
//
// Inputs are small integers, so every reduction is exact in every dtype and
// results are compared bit for bit (avg on floats: within one rounding).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "braid/comm.h"
#include "braid/reduce.h"
#include "support/multiproc.h"

using namespace braid;

namespace {

double pattern(int r, size_t i, int salt) { return double(int((r * 7 + i * 3 + salt) % 5) - 2); }

void fill(std::vector<uint8_t>& buf, size_t off, size_t count, DType t, int r, int salt,
          size_t base = 0) {
  size_t es = dtype_size(t);
  for (size_t i = 0; i < count; ++i) {
    double v = pattern(r, base + i, salt);
    dtype_store(buf.data() + (off + i) * es, t, t == DType::kU8 ? v + 2 : v);
  }
}

// Serial reference: fold ranks 0..n-1 in order with the same kernels.
std::vector<uint8_t> reference(size_t count, DType t, ReduceOp op, int n, int salt, size_t base) {
  size_t es = dtype_size(t);
  std::vector<uint8_t> acc(count * es), cur(count * es);
  fill(acc, 0, count, t, 0, salt, base);
  for (int r = 1; r < n; ++r) {
    fill(cur, 0, count, t, r, salt, base);
    reduce2(acc.data(), acc.data(), cur.data(), count, t, op);
  }
  if (op == ReduceOp::kAvg) scale_avg(acc.data(), count, t, n);
  return acc;
}

// Returns the number of mismatching elements (first one reported).
size_t compare(const uint8_t* got, const uint8_t* want, size_t count, DType t, ReduceOp op,
               const std::string& what) {
  size_t es = dtype_size(t), bad = 0;
  for (size_t i = 0; i < count; ++i) {
    if (std::memcmp(got + i * es, want + i * es, es) == 0) continue;
    if (op == ReduceOp::kAvg && dtype_is_float(t)) {
      double a = dtype_load(got + i * es, t), b = dtype_load(want + i * es, t);
      double tol = (t == DType::kF32 || t == DType::kF64) ? 1e-6 : 1e-2;
      if (std::fabs(a - b) <= tol * std::max(1.0, std::fabs(b))) continue;
    }
    if (bad++ == 0) ADD_FAILURE() << what << ": first wrong element " << i;
  }
  return bad;
}

struct Matrix {
  std::vector<size_t> counts;
  bool all_dtypes_for_big = false;
};

void run_matrix(Communicator& c, const Matrix& m) {
  const int n = c.size(), r = c.rank();
  int salt = 0;
  for (size_t count : m.counts) {
    const bool big = count > 100000;
    for (int ti = 0; ti < kNumDTypes; ++ti) {
      DType t = DType(ti);
      if (big && t != DType::kF32 && t != DType::kBF16 && t != DType::kI32) continue;
      const size_t es = dtype_size(t);
      for (int oi = 0; oi < kNumReduceOps; ++oi) {
        ReduceOp op = ReduceOp(oi);
        if (!reduce_op_supported(op, t)) continue;
        if (big && op != ReduceOp::kSum && op != ReduceOp::kMax) continue;
        ++salt;
        std::string tag = std::string(dtype_name(t)) + " " + reduce_op_name(op) + " count " +
                          std::to_string(count) + " n " + std::to_string(n);
        // all_reduce with every algorithm, in place and out of place
        for (const char* algo : {"ring", "hd", "rd", "direct", "chain", "oneshot"}) {
          c.set_algorithm("all_reduce", algo);
          std::vector<uint8_t> in(count * es), out(count * es, 0xAB);
          fill(in, 0, count, t, r, salt);
          auto want = reference(count, t, op, n, salt, 0);
          c.all_reduce(in.data(), out.data(), count, t, op);
          compare(out.data(), want.data(), count, t, op, "all_reduce " + std::string(algo) + " " + tag);
          c.all_reduce(in.data(), in.data(), count, t, op);
          compare(in.data(), want.data(), count, t, op, "all_reduce in-place " + std::string(algo) + " " + tag);
        }
        // reduce_scatter, every algorithm
        for (const char* algo : {"ring", "direct"}) {
          c.set_algorithm("reduce_scatter", algo);
          std::vector<uint8_t> in(count * n * es), out(count * es, 0xAB);
          fill(in, 0, count * n, t, r, salt);
          auto want = reference(count, t, op, n, salt, size_t(r) * count);
          c.reduce_scatter(in.data(), out.data(), count, t, op);
          compare(out.data(), want.data(), count, t, op, "reduce_scatter " + std::string(algo) + " " + tag);
        }
        // reduce to a rotating root
        for (const char* algo : {"tree", "ring", "direct"}) {
          c.set_algorithm("reduce", algo);
          int root = salt % n;
          std::vector<uint8_t> in(count * es), out(count * es, 0xAB);
          fill(in, 0, count, t, r, salt);
          c.reduce(in.data(), out.data(), count, t, op, root);
          if (r == root) {
            auto want = reference(count, t, op, n, salt, 0);
            compare(out.data(), want.data(), count, t, op, "reduce " + std::string(algo) + " " + tag);
          }
        }
        if (op != ReduceOp::kSum) continue;
        // data movement collectives: once per dtype
        for (const char* algo : {"tree", "chain"}) {
          c.set_algorithm("broadcast", algo);
          int root = (salt + 1) % n;
          std::vector<uint8_t> buf(count * es, 0xAB), want(count * es);
          fill(want, 0, count, t, root, salt);
          if (r == root) buf = want;
          c.broadcast(buf.data(), count, t, root);
          compare(buf.data(), want.data(), count, t, op, "broadcast " + std::string(algo) + " " + tag);
        }
        for (const char* algo : {"ring", "direct"}) {
          c.set_algorithm("all_gather", algo);
          std::vector<uint8_t> in(count * es), out(count * n * es, 0xAB), want(count * n * es);
          fill(in, 0, count, t, r, salt);
          for (int j = 0; j < n; ++j) fill(want, size_t(j) * count, count, t, j, salt);
          c.all_gather(in.data(), out.data(), count, t);
          compare(out.data(), want.data(), count * n, t, op, "all_gather " + std::string(algo) + " " + tag);
          // in place: own block already in the output
          std::vector<uint8_t> io(count * n * es, 0xAB);
          fill(io, size_t(r) * count, count, t, r, salt);
          c.all_gather(io.data() + size_t(r) * count * es, io.data(), count, t);
          compare(io.data(), want.data(), count * n, t, op, "all_gather in-place " + std::string(algo) + " " + tag);
        }
        {
          int root = salt % n;
          std::vector<uint8_t> in(count * es), out(count * n * es, 0xAB), want(count * n * es);
          fill(in, 0, count, t, r, salt);
          for (int j = 0; j < n; ++j) fill(want, size_t(j) * count, count, t, j, salt);
          c.gather(in.data(), out.data(), count, t, root);
          if (r == root) compare(out.data(), want.data(), count * n, t, op, "gather " + tag);
          std::vector<uint8_t> sin(count * n * es), sout(count * es, 0xAB), swant(count * es);
          fill(sin, 0, count * n, t, root, salt);
          fill(swant, 0, count, t, root, salt, size_t(r) * count);
          c.scatter(sin.data(), sout.data(), count, t, root);
          compare(sout.data(), swant.data(), count, t, op, "scatter " + tag);
        }
        {
          std::vector<uint8_t> in(count * n * es), out(count * n * es, 0xAB), want(count * n * es);
          for (int j = 0; j < n; ++j) fill(in, size_t(j) * count, count, t, r * n + j, salt);
          for (int j = 0; j < n; ++j) fill(want, size_t(j) * count, count, t, j * n + r, salt);
          c.all_to_all(in.data(), out.data(), count, t);
          compare(out.data(), want.data(), count * n, t, op, "all_to_all " + tag);
        }
      }
    }
  }
  // all_to_all_v: rank i sends (i + j) % 3 + count_base elements to rank j.
  for (size_t base : {size_t(0), size_t(5), size_t(1000)}) {
    auto cnt = [&](int from, int to) { return size_t((from + to) % 3) + base; };
    std::vector<size_t> sc(n), sd(n), rc(n), rd(n);
    size_t st = 0, rt = 0;
    for (int j = 0; j < n; ++j) {
      sc[j] = cnt(r, j); sd[j] = st; st += sc[j];
      rc[j] = cnt(j, r); rd[j] = rt; rt += rc[j];
    }
    std::vector<int32_t> in(st), out(rt, -1), want(rt);
    for (int j = 0; j < n; ++j)
      for (size_t k = 0; k < sc[j]; ++k) in[sd[j] + k] = int32_t(r * 100000 + j * 1000 + int(k));
    for (int j = 0; j < n; ++j)
      for (size_t k = 0; k < rc[j]; ++k) want[rd[j] + k] = int32_t(j * 100000 + r * 1000 + int(k));
    c.all_to_all_v(in.data(), sc, sd, out.data(), rc, rd, DType::kI32);
    EXPECT_EQ(out, want) << "all_to_all_v base " << base;
  }
  // point to point around the ring, with tags
  if (n > 1) {
    std::vector<int64_t> a(1003), b(1003, -1);
    for (size_t i = 0; i < a.size(); ++i) a[i] = int64_t(r * 10000 + int(i));
    Work s = c.send_async(a.data(), a.size(), DType::kI64, (r + 1) % n, 7);
    c.recv(b.data(), b.size(), DType::kI64, (r - 1 + n) % n, 7);
    s.wait();
    EXPECT_EQ(b[5], int64_t(((r - 1 + n) % n) * 10000 + 5));
  }
  c.barrier();
}

Matrix default_matrix() { return Matrix{{0, 1, 7, 1000, 1000003}}; }

void body(int rank, int size, std::shared_ptr<Store> store) {
  run_matrix(*braid::testing::make_comm(rank, size, store, 60), default_matrix());
}

}  // namespace

TEST(Collectives, World1) { braid::testing::expect_all_pass(1, body, std::chrono::seconds(300)); }
TEST(Collectives, World2) { braid::testing::expect_all_pass(2, body, std::chrono::seconds(300)); }
TEST(Collectives, World3) { braid::testing::expect_all_pass(3, body, std::chrono::seconds(300)); }
TEST(Collectives, World4) { braid::testing::expect_all_pass(4, body, std::chrono::seconds(400)); }
TEST(Collectives, World5) { braid::testing::expect_all_pass(5, body, std::chrono::seconds(400)); }
TEST(Collectives, World8) { braid::testing::expect_all_pass(8, body, std::chrono::seconds(600)); }

// Every output that a call does not read again (all_to_all blocks, gathered
// and scattered blocks) written with streaming stores, whatever its size:
// odd lengths and misaligned destinations (1-byte dtypes, 7 elements).
TEST(Collectives, StreamedOutputsWorld3) {
  braid::testing::expect_all_pass(3, [](int rank, int size, std::shared_ptr<Store> store) {
    run_matrix(*braid::testing::make_comm(rank, size, store, 60), Matrix{{0, 1, 7, 1000, 70001}});
  }, std::chrono::seconds(300), {"BRAID_STREAM_OUT_BYTES=1"});
}
