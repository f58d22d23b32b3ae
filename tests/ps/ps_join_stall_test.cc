// A joining server that stalls must not hold its chain's writes
// (src/ps/replication/chain_join.h), in real processes at the wire level: 2 servers
// keep 2 shards on chains of 2 while a worker trains under BSP; server 1 is
// SIGKILLed, so server 0 is shard 0's head and tail. A raw client, holding
// the job secret, takes shard 0's state from server 0 as joiner 7 and then
// stalls, neither committing nor closing; the worker's next push, which
// needs shard 0's forwarding lock, must complete once the join's deadline
// passes. The servers' timeout (--ps-timeout) is far longer than the
// worker's, so a tail that held the lock until its timeout would fail the
// worker's push. The client then commits, late, and is refused; the chain
// in the store is unchanged. The same again with joiner 8, which stalls
// with half of the state read and the rest more than the socket buffers
// hold: the tail gives up sending and ends the stream. A real replacement then joins both shards,
// and the worker finishes with every acknowledged push applied at the
// final tails.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "braid/error.h"
#include "braid/ps.h"
#include "comm/store/auth.h"
#include "ps/replication/chain.h"
#include "ps/replication/chain_join.h"
#include "ps/io/socket.h"
#include "ps/io/wire.h"
#include "join_test_util.h"
#include "support/multiproc.h"

namespace {

using namespace std::chrono_literals;
namespace ps = braid::ps;
namespace wire = braid::ps::wire;
using braid::testing::ps_join::join_conn;
using braid::testing::ps_join::join_frame;
using braid::testing::ps_join::request_state;

const std::string kSecret = "ps-join-stall-0123456789abcdef";
constexpr int kServers = 2, kSteps = 10, kVictim = 1;
constexpr int64_t kKeySize = 8, kBigSize = int64_t(8) << 20;  // 16 MiB on each server
// The servers' timeout, far above the worker's: a write that waited for a
// stalled join until the servers' timeout fails at the worker's, before
// the client's waits (kDeadline) end the stall.
constexpr auto kServerTimeout = 600s;
constexpr auto kWorkerTimeout = 30s;
constexpr auto kDeadline = 60s;

ps::Layout layout() {
  ps::Layout l(kServers);
  l.add_dense("w", kKeySize);  // 4 elements on each server
  l.add_dense("big", kBigSize);  // never pushed: a state far larger than socket buffers
  return l;
}

ps::ServerOptions options(int id) {
  ps::ServerOptions o;
  o.rank = id;
  o.workers = 1;
  o.replicas = 2;
  o.secret = kSecret;
  o.lr.base = 0.1f;
  o.timeout = kServerTimeout;
  return o;
}

const std::vector<std::vector<float>> kInit{std::vector<float>(size_t(kKeySize), 1.0f),
                                            std::vector<float>(size_t(kBigSize), 0.5f)};

// Asks server `p` for shard `s`'s state as joiner `id` on a fresh join
// connection and reads `part` of its bytes (the state's size: *size).
// With `small_buffer` the connection's receive buffer is pinned small, so
// the state the client does not read fills it and the tail's send buffer
// and the tail's send of the rest waits on the client.
int take_state(braid::Store& store, int p, uint32_t s, uint32_t id, double part, uint64_t* size,
               bool small_buffer = false) {
  const int fd = join_conn(store, kSecret, p, s, id);
  if (small_buffer) {
    const int bytes = 64 << 10;
    EXPECT_EQ(::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes), 0);
  }
  const wire::Header r = request_state(fd, s, id);
  const int64_t deadline = wire::deadline_after(10s);
  EXPECT_GT(r.payload, uint64_t(kBigSize) * 4 / 2);  // its half of "big", at least
  *size = r.payload;
  std::vector<uint8_t> state(size_t(double(r.payload) * part));
  wire::recv_payload(fd, state.data(), state.size(), deadline, "test: state");
  return fd;
}

// Reads the rest of the state, commits, and expects the tail's refusal:
// the join's deadline passed, the chain is unchanged.
void late_commit(int fd, uint32_t s, uint32_t id, uint64_t rest) {
  const int64_t deadline = wire::deadline_after(10s);
  std::vector<uint8_t> state(rest);
  wire::recv_payload(fd, state.data(), state.size(), deadline, "test: the rest of the state");
  wire::send_frame(fd, join_frame(s, id, wire::kCommit), nullptr, deadline,
                   "test: the late commit");
  const wire::Header r = wire::recv_header(fd, deadline, "test: the refusal");
  EXPECT_EQ(r.op, wire::kJoin | wire::kReply);
  EXPECT_EQ(r.status, uint32_t(braid::Errc::kTimeout) + 1);
  ASSERT_LE(r.payload, wire::kMaxMessage);
  std::string msg(r.payload, '\0');
  wire::recv_payload(fd, msg.data(), msg.size(), deadline, "test: the refusal's message");
  for (const std::string& w :
       {"parameter server 0, shard 0: join of server " + std::to_string(id),
        std::string("no commit from the joiner within the join's deadline"),
        std::string("join abandoned"), std::string("the chain is unchanged")})
    EXPECT_NE(msg.find(w), std::string::npos) << msg;
  char x;
  EXPECT_THROW(braid::comm::read_full(fd, &x, 1, deadline, "test: after the refusal"),
               braid::Error);
  ::close(fd);
}

void stalled_joins(std::shared_ptr<braid::Store> store) {
  ps::ChainView view(kServers, 2, store);
  store->wait({"test/training"}, kDeadline);
  store->set_str("test/kill", "1");
  store->wait({"test/killed"}, kDeadline);
  view.declare_dead(kVictim);
  ASSERT_EQ(view.chain(0), std::vector<int>{0});
  const uint32_t epoch = view.epoch();
  // Joiner 7 takes the whole state and stalls until the worker's push,
  // which waits on shard 0's lock, came back.
  uint64_t size = 0;
  int fd = take_state(*store, 0, 0, 7, 1.0, &size);
  store->set_str("test/stalled/0", "1");
  store->wait({"test/pushed/0"}, kDeadline);
  late_commit(fd, 0, 7, 0);
  // Joiner 8 stalls with half of the state read, the rest more than the
  // buffers between it and the tail hold: the tail's send waits, then
  // past the deadline the tail ends the stream mid-state.
  fd = take_state(*store, 0, 0, 8, 0.5, &size, true);
  store->set_str("test/stalled/1", "1");
  store->wait({"test/pushed/1"}, kDeadline);
  std::vector<uint8_t> rest(size - size / 2);
  EXPECT_THROW(wire::recv_payload(fd, rest.data(), rest.size(), wire::deadline_after(10s),
                                  "test: the rest of a state cut short"),
               braid::Error);
  ::close(fd);
  view.refresh();
  EXPECT_EQ(view.chain(0), std::vector<int>{0});
  EXPECT_EQ(view.chain(1), std::vector<int>{0});
  EXPECT_EQ(view.epoch(), epoch);
  EXPECT_FALSE(view.dead(0));
  EXPECT_FALSE(view.dead(7));
  EXPECT_FALSE(view.dead(8));
  store->set_str("test/stalls_done", "1");
}

void run_server(int p, std::shared_ptr<braid::Store> store) {
  braid::testing::ps_join::run_server(layout(), options(p), kVictim, store, kInit);
}

// After the stalled joins, a real replacement joins both shards at their
// tail, server 0, which kept serving.
void run_replacement(std::shared_ptr<braid::Store> store) {
  braid::testing::ps_join::run_replacement(layout(), options, kVictim, 2, {0, 1},
                                           "test/stalls_done", store, kInit);
}

// Steps 3 and 4 each push while a joiner stalls on shard 0's state; each
// completes, acknowledged, before the joiner commits.
void run_worker(std::shared_ptr<braid::Store> store) {
  ps::Worker worker(layout(), braid::testing::ps_join::chain_worker(0, kSecret, kWorkerTimeout),
                    store);
  std::vector<float> p(static_cast<size_t>(kKeySize)), g = p;
  worker.pull({{0, {}, p.data()}}, 0);
  for (int64_t c = 0; c < kSteps; ++c) {
    if (c == 2) store->set_str("test/training", "1");
    const int stall = c == 3 ? 0 : c == 4 ? 1 : -1;
    if (stall >= 0) store->wait({"test/stalled/" + std::to_string(stall)}, kDeadline);
    if (c == 5) store->wait({"test/joined"}, kDeadline);
    const int64_t before = worker.worker_stats().pushes_acked.at(0);
    for (size_t i = 0; i < g.size(); ++i) g[i] = p[i] * 0.5f + 0.01f * float(c + i);
    worker.push_pull({{0, {}, g.data()}}, {{0, {}, p.data()}}, c);
    EXPECT_EQ(worker.worker_stats().pushes_acked.at(0), before + 1) << "step " << c;
    if (stall >= 0) store->set_str("test/pushed/" + std::to_string(stall), "1");
  }
  const ps::WorkerStats ws = worker.worker_stats();
  for (int s = 0; s < kServers; ++s) {
    const ps::ServerStats st = worker.stats(s);  // from the shard's final tail, the replacement
    EXPECT_EQ(st.pushes_accepted, ws.pushes_acked.at(size_t(s))) << "shard " << s;
    EXPECT_EQ(st.rounds_closed, kSteps) << "shard " << s;
  }
  EXPECT_EQ(ws.epoch, 3u);  // one death, two joins; the stalled ones left no trace
  worker.finish();
}

TEST(PsJoinStall, TailAbandonsAStalledJoinAndItsWritesGoOn) {
  const int n = 1 + kServers + 2;
  auto results = braid::testing::run_ranks(
      n,
      [](int rank, int, std::shared_ptr<braid::Store> store) {
        if (rank == 0)
          run_worker(store);
        else if (rank <= kServers)
          run_server(rank - 1, store);
        else if (rank == kServers + 1)
          run_replacement(store);
        else
          stalled_joins(store);
      },
      180s);
  braid::testing::ps_join::expect_passed_but(results, 1 + kVictim);
}

// The join's deadline grows with the state, at a rate well below a
// 1 Gbit/s link (so a large shard over a slow link is not refused), from a
// base far below the default --ps-timeout (so a stalled joiner stops
// training for much less).
TEST(PsJoinStall, JoinWindowScalesWithTheState) {
  const auto base = ps::join_window(0);
  EXPECT_GE(base, 1s);
  EXPECT_LE(base * 10, ps::ServerOptions{}.timeout);
  const uint64_t gib = uint64_t(1) << 30;
  EXPECT_GE(ps::join_window(gib) - base, 10s);  // <= ~100 MiB/s
  EXPECT_GT(ps::join_window(2 * gib), ps::join_window(gib));
}

}  // namespace
