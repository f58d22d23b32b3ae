// Every registered algorithm of every collective, forced with
// set_algorithm, computes the right result and is the one that ran
// (last_algorithm); one that cannot run on the communicator (or for the
// buffer) fails with Error(kInvalidArgument) naming it, and the
// communicator carries on. One multi-process job per world size and
// transport (real processes).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>

#include "braid/comm.h"
#include "braid/error.h"
#include "support/multiproc.h"

using namespace braid;

namespace {

bool has(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

int32_t val(int rank, size_t i) { return int32_t(i % 13) + 100 * rank; }

// One call of `op` with `count` elements per rank, through `shared` memory
// where the collective's shared buffer goes, checked against the serial
// result (ADD_FAILURE at the first wrong element).
void run_checked(Communicator& c, const std::string& op, size_t count, SharedBuffer* shared,
                 const std::string& what) {
  const int n = c.size(), r = c.rank();
  const size_t all = count * size_t(n);
  std::vector<int32_t> in(all), out(all, -1);
  // The buffer the shared algorithm looks for: recv (all_reduce,
  // all_gather) or send (reduce_scatter).
  auto place = [&](std::vector<int32_t>& v) -> int32_t* {
    if (!shared) return v.data();
    auto* p = shared->as<int32_t>();
    std::memcpy(p, v.data(), v.size() * 4);
    return p;
  };
  auto check = [&](const int32_t* got, size_t len, const std::function<int32_t(size_t)>& want) {
    for (size_t i = 0; i < len; ++i)
      if (got[i] != want(i)) {
        ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", want " << want(i);
        return;
      }
  };
  const int32_t rank_sum = 100 * n * (n - 1) / 2;
  const int root = n - 1;
  if (op == "all_reduce") {
    for (size_t i = 0; i < count; ++i) in[i] = val(r, i);
    in.resize(count);
    int32_t* buf = place(in);
    c.all_reduce(buf, buf, count, DType::kI32, ReduceOp::kSum);
    check(buf, count, [&](size_t i) { return n * int32_t(i % 13) + rank_sum; });
  } else if (op == "broadcast") {
    for (size_t i = 0; i < count; ++i) in[i] = r == root ? val(r, i) : 0;
    c.broadcast(in.data(), count, DType::kI32, root);
    check(in.data(), count, [&](size_t i) { return val(root, i); });
  } else if (op == "reduce") {
    for (size_t i = 0; i < count; ++i) in[i] = val(r, i);
    c.reduce(in.data(), out.data(), count, DType::kI32, ReduceOp::kSum, root);
    if (r == root) check(out.data(), count, [&](size_t i) { return n * int32_t(i % 13) + rank_sum; });
  } else if (op == "all_gather") {
    for (size_t i = 0; i < count; ++i) in[i] = val(r, i);
    int32_t* dst = place(out);
    c.all_gather(in.data(), dst, count, DType::kI32);
    check(dst, all, [&](size_t i) { return val(int(i / count), i % count); });
  } else if (op == "reduce_scatter") {
    for (size_t i = 0; i < all; ++i) in[i] = val(r, i);
    int32_t* src = place(in);
    c.reduce_scatter(src, out.data(), count, DType::kI32, ReduceOp::kSum);
    check(out.data(), count,
          [&](size_t i) { return n * int32_t((size_t(r) * count + i) % 13) + rank_sum; });
  } else if (op == "gather") {
    for (size_t i = 0; i < count; ++i) in[i] = val(r, i);
    c.gather(in.data(), out.data(), count, DType::kI32, root);
    if (r == root) check(out.data(), all, [&](size_t i) { return val(int(i / count), i % count); });
  } else if (op == "scatter") {
    for (size_t i = 0; i < all; ++i) in[i] = val(root, i);
    c.scatter(in.data(), out.data(), count, DType::kI32, root);
    check(out.data(), count, [&](size_t i) { return val(root, size_t(r) * count + i); });
  } else if (op == "all_to_all" || op == "all_to_all_v") {
    // Block j of rank r's input goes to rank j: value 1000·r + 10·j + i%7.
    for (size_t i = 0; i < all; ++i)
      in[i] = 1000 * r + 10 * int32_t(i / count) + int32_t((i % count) % 7);
    if (op == "all_to_all") {
      c.all_to_all(in.data(), out.data(), count, DType::kI32);
    } else {
      std::vector<size_t> counts(size_t(n), count);
      std::vector<size_t> displs(static_cast<size_t>(n));
      for (int j = 0; j < n; ++j) displs[size_t(j)] = size_t(j) * count;
      c.all_to_all_v(in.data(), counts, displs, out.data(), counts, displs, DType::kI32);
    }
    check(out.data(), all, [&](size_t i) {
      return 1000 * int32_t(i / count) + 10 * r + int32_t((i % count) % 7);
    });
  } else if (op == "barrier") {
    c.barrier();
  } else {
    FAIL() << "no check for " << op;
  }
}

void forced_matrix(int rank, int size, std::shared_ptr<Store> store, const std::string& transport) {
  auto c = braid::testing::make_comm(rank, size, store, 60, transport);
  const size_t kLarge = 70001;  // > kSharedMinBytes, several ring chunks at 4 KiB
  SharedBuffer shared = c->alloc_shared(kLarge * 4 * size_t(size));
  // The shared algorithms run on buffers every rank maps (several ranks).
  const bool can_share = size > 1 && shared.shared();
  for (const char* op : {"all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter",
                         "gather", "scatter", "all_to_all", "all_to_all_v", "barrier"}) {
    const std::vector<std::string> here = c->algorithms(op);
    for (const std::string& algo : braid::comm::algorithms(op)) {
      c->set_algorithm(op, algo);
      const bool is_shared = algo == "shared";
      const bool runs = is_shared ? can_share : has(here, algo);
      for (size_t count : {size_t(3), kLarge}) {
        if (is_shared && count != kLarge) continue;
        const std::string what = std::string(op) + " forced to " + algo + ", count " +
                                 std::to_string(count) + ", rank " + std::to_string(rank) +
                                 " of " + std::to_string(size);
        if (!runs) {
          try {
            run_checked(*c, op, count, is_shared ? &shared : nullptr, what);
            ADD_FAILURE() << what << ": ran (as " << c->last_algorithm()
                          << ") where it cannot";
          } catch (const Error& e) {
            const std::string msg = e.what();
            EXPECT_EQ(e.code(), Errc::kInvalidArgument) << msg;
            EXPECT_NE(msg.find("'" + algo + "'"), std::string::npos) << msg;
            EXPECT_NE(msg.find(op), std::string::npos) << msg;
            EXPECT_NE(msg.find("needs"), std::string::npos) << msg;
          }
          continue;
        }
        run_checked(*c, op, count, is_shared ? &shared : nullptr, what);
        EXPECT_EQ(c->last_algorithm(), algo) << what;
      }
    }
    c->set_algorithm(op, "auto");
  }
  // After the refused calls the ranks still agree on their sequence.
  int32_t one = 1, sum = 0;
  c->all_reduce(&one, &sum, 1, DType::kI32, ReduceOp::kSum);
  EXPECT_EQ(sum, size);
}

void shm(int rank, int size, std::shared_ptr<Store> store) { forced_matrix(rank, size, store, "shm"); }

const std::vector<std::string> kSmallChunks = {"BRAID_CHUNK_BYTES=4096"};

TEST(ForcedAlgorithms, World1) { braid::testing::expect_all_pass(1, shm, std::chrono::seconds(120), kSmallChunks); }
TEST(ForcedAlgorithms, World2) { braid::testing::expect_all_pass(2, shm, std::chrono::seconds(300), kSmallChunks); }
TEST(ForcedAlgorithms, World3) { braid::testing::expect_all_pass(3, shm, std::chrono::seconds(300), kSmallChunks); }
TEST(ForcedAlgorithms, World4) { braid::testing::expect_all_pass(4, shm, std::chrono::seconds(300), kSmallChunks); }

// Over TCP "chain" (every peer on shared memory) and "shared" cannot run.
TEST(ForcedAlgorithms, World3Tcp) {
  braid::testing::expect_all_pass(
      3, [](int rank, int size, std::shared_ptr<Store> store) { forced_matrix(rank, size, store, "tcp"); },
      std::chrono::seconds(300), kSmallChunks);
}

// Two pretend hosts of two ranks: "hier" runs.
TEST(ForcedAlgorithms, World4TwoHosts) {
  braid::testing::expect_all_pass(
      4,
      [](int rank, int size, std::shared_ptr<Store> store) {
        ::setenv("BRAID_HOSTNAME", rank % 2 == 0 ? "a" : "b", 1);
        forced_matrix(rank, size, store, "");
      },
      std::chrono::seconds(300), kSmallChunks);
}

}  // namespace
