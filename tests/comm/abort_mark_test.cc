// AbortMark (src/comm/transport/shm/abort_mark.h): the first writer wins,
// and a reader sees either no mark or the winner's whole note.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "comm/transport/shm/abort_mark.h"

using braid::Errc;
using braid::Error;
using braid::comm::shm::AbortMark;
using braid::comm::shm::AbortNote;

namespace {

// A mark in zeroed memory, as a fresh shared-memory segment holds it.
std::unique_ptr<AbortMark> zeroed_mark() {
  auto m = std::make_unique<AbortMark>();
  std::memset(static_cast<void*>(m.get()), 0, sizeof(AbortMark));
  return m;
}

// Each racer's message fills the whole buffer with its own letter, so a
// note mixing two writers' bytes, or cut short, shows.
std::string full_message(char letter) { return std::string(AbortMark::kMsgBytes - 1, letter); }

}  // namespace

TEST(AbortMark, ZeroedMemoryIsClear) {
  auto m = zeroed_mark();
  EXPECT_FALSE(m->claimed());
  EXPECT_FALSE(m->read().has_value());
  m->check([](int) { return std::string("nobody"); });  // does not throw
}

TEST(AbortMark, TwoThreadsRacingExactlyOneWinsIntact) {
  const std::string msg[2] = {full_message('a'), full_message('b')};
  const Errc code[2] = {Errc::kTimeout, Errc::kMismatch};
  for (int round = 0; round < 500; ++round) {
    auto m = zeroed_mark();
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    bool won[2] = {false, false};
    // A third thread reads while the two write: whatever it sees once the
    // mark reads as set must be one writer's note, whole.
    std::string seen;
    int seen_rank = -1;
    std::thread reader([&] {
      ready.fetch_add(1);
      while (!go.load()) std::this_thread::yield();
      for (;;) {
        if (std::optional<AbortNote> n = m->read()) {
          seen = n->msg;
          seen_rank = n->rank;
          return;
        }
        std::this_thread::yield();
      }
    });
    std::thread writers[2];
    for (int w = 0; w < 2; ++w)
      writers[w] = std::thread([&, w] {
        ready.fetch_add(1);
        while (!go.load()) std::this_thread::yield();
        won[w] = m->mark(w, code[w], msg[w]);
      });
    while (ready.load() < 3) std::this_thread::yield();
    go.store(true);
    for (auto& t : writers) t.join();
    reader.join();

    ASSERT_NE(won[0], won[1]) << "round " << round << ": exactly one mark() must win";
    const int w = won[0] ? 0 : 1;
    std::optional<AbortNote> n = m->read();
    ASSERT_TRUE(n.has_value());
    EXPECT_EQ(n->rank, w);
    EXPECT_EQ(n->code, code[w]);
    ASSERT_EQ(n->msg, msg[w]) << "round " << round << ": the winner's message, intact";
    ASSERT_EQ(seen_rank, w);
    ASSERT_EQ(seen, msg[w]) << "round " << round << ": a concurrent reader saw a torn message";
  }
}

TEST(AbortMark, LaterMarksChangeNothing) {
  auto m = zeroed_mark();
  EXPECT_TRUE(m->mark(3, Errc::kTimeout, "rank 3: all_reduce seq 7 timed out"));
  EXPECT_FALSE(m->mark(1, Errc::kPeerDied, "passing it on"));
  std::optional<AbortNote> n = m->read();
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(n->rank, 3);
  EXPECT_EQ(n->code, Errc::kTimeout);
  EXPECT_EQ(n->msg, "rank 3: all_reduce seq 7 timed out");
}

TEST(AbortMark, LongMessagesAreCutToTheBuffer) {
  auto m = zeroed_mark();
  const std::string longer(3 * AbortMark::kMsgBytes, 'x');
  EXPECT_TRUE(m->mark(0, Errc::kIo, longer));
  std::optional<AbortNote> n = m->read();
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(n->msg, longer.substr(0, AbortMark::kMsgBytes - 1));
}

TEST(AbortMark, CheckThrowsTheNoteNamingTheRank) {
  auto m = zeroed_mark();
  m->mark(2, Errc::kMismatch, "count 5 here, 6 on rank 0");
  try {
    m->check([](int r) { return "rank " + std::to_string(r) + " (pid 42)"; });
    ADD_FAILURE() << "check() returned on a set mark";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kMismatch);
    EXPECT_EQ(std::string(e.what()), "stopped, because rank 2 (pid 42) failed: count 5 here, 6 on rank 0");
  }
}
