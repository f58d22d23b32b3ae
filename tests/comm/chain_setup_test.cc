// The chain all-reduce's first call on a communicator sets up its shared
// ring (src/comm/algo/chain_reduce.cc) and then reduces through it at once.
// Each rank pre-faults the ring's data pages by writing to them; every such
// write must be over before any rank puts data in a slot, or it overwrites
// a byte of a peer's chunk (the result's first element of each 4 KiB page
// comes out wrong on every rank alike). The race needs one rank to lag in
// set-up, so the test makes many fresh communicators (each with its own
// ring) and checks every one's first chain all-reduce, with more ranks than
// this machine usually has cores.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "braid/comm.h"
#include "support/multiproc.h"

using namespace braid;

namespace {

// Few, large slots: the pre-faulting walks pages that the call then uses.
const std::vector<std::string> kEnv = {"BRAID_CHAIN_SLOTS=2", "BRAID_CHAIN_SLOT_BYTES=4194304"};

// Rank `rank`'s element i: no byte of any rank's value, or of their sum, is
// zero, so a zeroed byte anywhere in the slot shows in the result.
int64_t value(int rank, size_t i) {
  return int64_t(0x0101010101010101ull * uint64_t(1 + (i + size_t(rank)) % 7));
}

void first_calls(int rank, int size, std::shared_ptr<Store> store, int comms) {
  auto world = braid::testing::make_comm(rank, size, store, 60);
  // Every slot's worth (kEnv: two of 4 MiB) and a bit: every page that is
  // pre-faulted also carries data.
  const size_t count = (size_t(8) << 20) / sizeof(int64_t) + 123;
  std::vector<int64_t> want(count), buf(count);
  for (size_t i = 0; i < count; ++i) {
    want[i] = 0;
    for (int p = 0; p < size; ++p) want[i] += value(p, i);
  }
  size_t bad_calls = 0;
  for (int k = 0; k < comms; ++k) {
    auto c = world->split(0, rank);  // a fresh communicator: its ring is set up in its first call
    ASSERT_NE(c, nullptr);
    c->set_algorithm("all_reduce", "chain");
    for (size_t i = 0; i < count; ++i) buf[i] = value(rank, i);
    c->all_reduce(buf.data(), buf.data(), count, DType::kI64, ReduceOp::kSum);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < count; ++i)
      if (buf[i] != want[i] && bad++ == 0) first = i;
    if (bad) {
      ++bad_calls;
      ADD_FAILURE() << "communicator " << k << ", rank " << rank << ": " << bad << " of " << count
                    << " elements wrong after the first chain all-reduce; element " << first
                    << " is " << buf[first] << ", expected " << want[first];
    }
  }
  EXPECT_EQ(bad_calls, 0u);
}

}  // namespace

TEST(ChainSetup, FirstCallOnFreshRingsIsExact4) {
  braid::testing::expect_all_pass(4, [](int rank, int size, std::shared_ptr<Store> store) {
    first_calls(rank, size, std::move(store), 16);
  }, std::chrono::seconds(300), kEnv);
}

TEST(ChainSetup, FirstCallOnFreshRingsIsExact6) {
  braid::testing::expect_all_pass(6, [](int rank, int size, std::shared_ptr<Store> store) {
    first_calls(rank, size, std::move(store), 12);
  }, std::chrono::seconds(300), kEnv);
}
