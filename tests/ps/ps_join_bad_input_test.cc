// Bad joins on the wire, at the tail's side (src/ps/replication/chain_join.h), in real
// processes: 3 servers keep 3 shards on chains of 2 (shard s on servers s
// and s+1 mod 3) while 2 workers train under BSP. A raw client, holding the
// job secret, sends joins that must be refused: a hello for a shard the
// server does not keep, a join of another shard than its hello named, a
// join under an original server's id, a commit before any state, a join at
// a non-tail, and a join into a chain that has its 2 live members. Server 1
// is then SIGKILLed, so shard 0's chain is server 0 alone; the client takes
// the state from server 0 and answers with a garbage, a truncated and a
// wrong commit. Each gets an error reply naming what was wrong, on that
// connection only, and leaves the chain as it was. Then a real replacement
// joins shards 0 and 1, a join into the now full shard 0 at its new tail is
// refused, and the workers, which trained through all of it, finish with
// every acknowledged push applied at the final tails.
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
#include "ps/io/socket.h"
#include "ps/io/wire.h"
#include "join_test_util.h"
#include "support/multiproc.h"

namespace {

using namespace std::chrono_literals;
namespace ps = braid::ps;
namespace wire = braid::ps::wire;
using braid::testing::ps_join::join_frame;
using braid::testing::ps_join::request_state;

const std::string kSecret = "ps-join-bad-input-0123456789";
constexpr int kServers = 3, kWorkers = 2, kSteps = 24, kVictim = 1;
constexpr int64_t kKeySize = 9;
constexpr auto kDeadline = 60s;

ps::Layout layout() {
  ps::Layout l(kServers);
  l.add_dense("w", kKeySize);  // 3 elements on each server
  return l;
}

ps::ServerOptions options(int id) {
  ps::ServerOptions o;
  o.rank = id;
  o.workers = kWorkers;
  o.replicas = 2;
  o.secret = kSecret;
  o.lr.base = 0.1f;
  o.timeout = kDeadline;
  return o;
}

const std::vector<std::vector<float>> kInit{std::vector<float>(size_t(kKeySize), 1.0f)};

int join_conn(braid::Store& store, int p, uint32_t shard, uint32_t id) {
  return braid::testing::ps_join::join_conn(store, kSecret, p, shard, id);
}

// The next reply on `fd` is an error of `code` whose message holds every
// one of `words`; the server then closes the connection.
void refused(int fd, braid::Errc code, const std::vector<std::string>& words) {
  const int64_t deadline = wire::deadline_after(10s);
  const wire::Header r = wire::recv_header(fd, deadline, "test: the refusal");
  EXPECT_EQ(r.status, uint32_t(code) + 1) << "op " << r.op;
  ASSERT_LE(r.payload, wire::kMaxMessage);
  std::string msg(r.payload, '\0');
  wire::recv_payload(fd, msg.data(), msg.size(), deadline, "test: the refusal's message");
  for (const std::string& w : words) EXPECT_NE(msg.find(w), std::string::npos) << msg;
  char c;
  EXPECT_THROW(braid::comm::read_full(fd, &c, 1, deadline, "test: after the refusal"), braid::Error);
  ::close(fd);
}

// A join frame on a fresh connection whose hello names `hello_shard`.
void send_join(braid::Store& store, int p, uint32_t hello_shard, const wire::Header& j,
               braid::Errc code, const std::vector<std::string>& words) {
  const int fd = join_conn(store, p, hello_shard, j.worker);
  const int64_t deadline = wire::deadline_after(10s);
  const wire::Header hr = wire::recv_header(fd, deadline, "test: hello reply");
  ASSERT_EQ(hr.status, 0u);
  wire::send_frame(fd, j, nullptr, deadline, "test: join");
  refused(fd, code, words);
}

// Asks server `p` for shard `s`'s state as joiner `id` and reads it; the
// caller sends the commit (or not).
int take_state(braid::Store& store, int p, uint32_t s, uint32_t id) {
  const int fd = join_conn(store, p, s, id);
  const wire::Header r = request_state(fd, s, id);
  const int64_t deadline = wire::deadline_after(10s);
  EXPECT_GT(r.payload, 0u);
  std::vector<uint8_t> state(r.payload);
  wire::recv_payload(fd, state.data(), state.size(), deadline, "test: state");
  return fd;
}

void expect_chain(ps::ChainView& view, int s, const std::vector<int>& members) {
  view.refresh();
  EXPECT_EQ(view.chain(s), members) << "shard " << s;
}

void bad_joins(std::shared_ptr<braid::Store> store) {
  braid::Store& st = *store;
  ps::ChainView view(kServers, 2, store);
  using braid::Errc;
  store->wait({"test/training"}, kDeadline);
  // Server 1 keeps shards 1 and 0 (tail of 0); server 0 is shard 0's head.
  {
    const int fd = join_conn(st, 1, 2, 7);
    refused(fd, Errc::kInvalidArgument, {"hello for shard 2", "does not keep"});
  }
  send_join(st, 1, 0, join_frame(1, 7), Errc::kProtocol, {"only a join of its hello's shard"});
  send_join(st, 1, 0, join_frame(0, 1), Errc::kInvalidArgument,
            {"shard 0: join of server 1", "replacement's id (>= 3)"});
  send_join(st, 1, 0, join_frame(0, 7, wire::kCommit), Errc::kInvalidArgument,
            {"a commit before the state was sent"});
  send_join(st, 0, 0, join_frame(0, 7), Errc::kInvalidArgument,
            {"parameter server 0, shard 0: join of server 7", "not the tail"});
  send_join(st, 1, 0, join_frame(0, 7), Errc::kInvalidArgument,
            {"refused", "shard 0 (members 0 1) already has the 2 live members"});
  expect_chain(view, 0, {0, 1});

  // Server 1 dies; shard 0's chain is server 0 alone, which hands it out.
  store->set_str("test/kill", "1");
  store->wait({"test/killed"}, kDeadline);
  view.declare_dead(kVictim);
  expect_chain(view, 0, {0});
  {  // garbage instead of the commit
    const int fd = take_state(st, 0, 0, 7);
    const std::vector<uint8_t> junk(sizeof(wire::Header), 0xab);
    braid::comm::write_full(fd, junk.data(), junk.size(), wire::deadline_after(5s), "junk");
    refused(fd, Errc::kProtocol, {"no commit from the joiner", "not a parameter-server frame",
                                  "the chain is unchanged"});
  }
  {  // a truncated commit: half a header, then the joiner stops sending
    const int fd = take_state(st, 0, 0, 7);
    const wire::Header c = join_frame(0, 7, wire::kCommit);
    braid::comm::write_full(fd, &c, sizeof c / 2, wire::deadline_after(5s), "half a commit");
    ::shutdown(fd, SHUT_WR);
    refused(fd, Errc::kProtocol, {"no commit from the joiner", "closed", "the chain is unchanged"});
  }
  {  // a commit naming another joiner
    const int fd = take_state(st, 0, 0, 7);
    wire::send_frame(fd, join_frame(0, 8, wire::kCommit), nullptr, wire::deadline_after(5s),
                     "a wrong commit");
    refused(fd, Errc::kProtocol, {"expected the joiner's commit", "server 8"});
  }
  expect_chain(view, 0, {0});
  EXPECT_FALSE(view.dead(7));
  store->set_str("test/bad_done", "1");

  // The real replacement (id 3) joined 0 and 1: shard 0 is full again.
  store->wait({"test/joined"}, kDeadline);
  expect_chain(view, 0, {0, 3});
  expect_chain(view, 1, {2, 3});
  send_join(st, 3, 0, join_frame(0, 9), Errc::kInvalidArgument,
            {"parameter server 3, shard 0: join of server 9",
             "shard 0 (members 0 3) already has the 2 live members"});
  store->set_str("test/all_bad_done", "1");
}

void run_server(int p, std::shared_ptr<braid::Store> store) {
  braid::testing::ps_join::run_server(layout(), options(p), kVictim, store, kInit);
}

void run_replacement(std::shared_ptr<braid::Store> store) {
  braid::testing::ps_join::run_replacement(layout(), options, kVictim, 3, {0, 1}, "test/bad_done",
                                           store, kInit);
}

// The workers train throughout; worker 0 lets the client start once
// training runs and holds its last step until every bad join was tried.
void run_worker(int w, std::shared_ptr<braid::Store> store) {
  ps::Worker worker(layout(), braid::testing::ps_join::chain_worker(w, kSecret, kDeadline), store);
  std::vector<float> p(static_cast<size_t>(kKeySize)), g = p;
  worker.pull({{0, {}, p.data()}}, 0);
  for (int64_t c = 0; c < kSteps; ++c) {
    if (w == 0 && c == 2) store->set_str("test/training", "1");
    if (w == 0 && c == kSteps - 1) store->wait({"test/all_bad_done"}, kDeadline);
    for (size_t i = 0; i < g.size(); ++i) g[i] = p[i] * 0.5f - float(w) + 0.01f * float(c + i);
    worker.push_pull({{0, {}, g.data()}}, {{0, {}, p.data()}}, c);
  }
  const ps::WorkerStats ws = worker.worker_stats();
  store->set_str("test/acked/" + std::to_string(w),
                 std::to_string(ws.pushes_acked.at(0)) + " " + std::to_string(ws.pushes_acked.at(1)) +
                     " " + std::to_string(ws.pushes_acked.at(2)));
  if (w == 0) {
    store->wait({"test/acked/1"}, kDeadline);
    const std::string other = store->get_str("test/acked/1");
    std::vector<int64_t> acked(kServers);
    std::sscanf(other.c_str(), "%ld %ld %ld", &acked[0], &acked[1], &acked[2]);
    for (int s = 0; s < kServers; ++s) {
      const ps::ServerStats st = worker.stats(s);  // from the shard's final tail
      EXPECT_EQ(st.pushes_accepted, acked[size_t(s)] + ws.pushes_acked.at(size_t(s))) << "shard " << s;
      EXPECT_EQ(st.rounds_closed, kSteps) << "shard " << s;
    }
    EXPECT_EQ(ws.epoch, 3u);  // one death, two joins
  }
  worker.finish();
}

TEST(PsJoinBadInput, TailRefusesBadJoinsAndKeepsServing) {
  const int n = kWorkers + kServers + 2;
  auto results = braid::testing::run_ranks(
      n,
      [](int rank, int, std::shared_ptr<braid::Store> store) {
        if (rank < kWorkers)
          run_worker(rank, store);
        else if (rank < kWorkers + kServers)
          run_server(rank - kWorkers, store);
        else if (rank == kWorkers + kServers)
          run_replacement(store);
        else
          bad_joins(store);
      },
      120s);
  braid::testing::ps_join::expect_passed_but(results, kWorkers + kVictim);
}

}  // namespace
