// Helpers shared by the wire-level join tests (ps_join_bad_input_test.cc,
// ps_join_stall_test.cc): a raw client's join connection and frames, a
// server that SIGKILLs itself on the store's "test/kill", and the check
// that every rank but that victim passed.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "braid/error.h"
#include "braid/ps.h"
#include "comm/store/auth.h"
#include "ps/io/socket.h"
#include "ps/io/wire.h"
#include "support/multiproc.h"

namespace braid::testing::ps_join {

// A worker of the join tests' chains of two (replicas 2).
inline ps::WorkerOptions chain_worker(int rank, const std::string& secret,
                                      std::chrono::milliseconds timeout) {
  ps::WorkerOptions o;
  o.rank = rank;
  o.replicas = 2;
  o.secret = secret;
  o.timeout = timeout;
  return o;
}

inline ps::wire::Header join_frame(uint32_t shard, uint32_t id, uint16_t flags = 0) {
  ps::wire::Header h;
  h.op = ps::wire::kJoin;
  h.key = shard;
  h.worker = id;
  h.flags = flags;
  return h;
}

// A join connection to server `p` for `shard`, its hello sent (the caller
// reads the hello's reply).
// On a fresh join connection (join_conn): reads the hello's reply, asks
// for shard `shard`'s state as joiner `id`, and returns the state's header
// (checked to be a successful join reply); its payload is left to read.
inline ps::wire::Header request_state(int fd, uint32_t shard, uint32_t id);

inline int join_conn(Store& store, const std::string& secret, int p, uint32_t shard, uint32_t id) {
  using namespace std::chrono_literals;
  const std::string addr = store.get_str("ps/server/" + std::to_string(p));
  const size_t colon = addr.rfind(':');
  const int fd = ps::connect_tcp(addr.substr(0, colon), std::atoi(addr.c_str() + colon + 1), 10s,
                                 "test join");
  comm::authenticate_connect(fd, secret, 10s);
  ps::wire::Header h = join_frame(shard, id, ps::wire::kJoinConn);
  h.op = ps::wire::kHello;
  ps::wire::send_frame(fd, h, nullptr, ps::wire::deadline_after(10s), "test hello");
  return fd;
}

// Serves as server `opt.rank` until every worker finished; the server
// `victim` SIGKILLs itself once the store holds "test/kill", after writing
// "test/killed".
inline void run_server(const ps::Layout& layout, const ps::ServerOptions& opt, int victim,
                       std::shared_ptr<Store> store, const std::vector<std::vector<float>>& init) {
  ps::Server srv(layout, opt, store, init);
  for (;;) {
    if (opt.rank == victim && store->check("test/kill")) {
      store->set_str("test/killed", "1");
      ::kill(::getpid(), SIGKILL);
    }
    try {
      srv.wait_finished(std::chrono::milliseconds(50));
      return;
    } catch (const Error& e) {
      if (e.code() != Errc::kTimeout) throw;
    }
  }
}

// A real replacement: once the store holds `after`, takes the next
// replacement id (which must be `id`: the raw clients' ids were never
// handed out), joins `shards` at tails other than the killed `victim`,
// writes "test/joined" and serves until every worker finished.
inline void run_replacement(const ps::Layout& layout,
                            const std::function<ps::ServerOptions(int)>& options, int victim,
                            int id, const std::vector<int>& shards, const std::string& after,
                            std::shared_ptr<Store> store,
                            const std::vector<std::vector<float>>& init) {
  const auto deadline = std::chrono::seconds(60);
  store->wait({after}, deadline);
  ps::ServerOptions o = options(ps::replacement_id(*store, layout.servers()));
  ASSERT_EQ(o.rank, id);
  o.join = shards;
  ps::Server srv(layout, o, store, init);
  ASSERT_EQ(srv.joins().size(), shards.size());
  for (const ps::JoinReport& j : srv.joins()) {
    EXPECT_NE(j.tail, victim);
    EXPECT_GT(j.pause_s, 0.0);
  }
  store->set_str("test/joined", "1");
  srv.wait_finished(deadline);
}

// Every rank passed, but rank `victim_rank`, which was SIGKILLed.
inline void expect_passed_but(const std::vector<RankResult>& results, int victim_rank) {
  for (const auto& r : results) {
    if (r.rank == victim_rank) {
      EXPECT_EQ(r.signal, SIGKILL) << "rank " << r.rank << " was to be killed mid-training";
      continue;
    }
    EXPECT_TRUE(r.exit_code == 0 && r.signal == 0)
        << "rank " << r.rank << " failed (exit " << r.exit_code << ", signal " << r.signal
        << "): " << r.output;
  }
}

inline ps::wire::Header request_state(int fd, uint32_t shard, uint32_t id) {
  namespace wire = ps::wire;
  const int64_t deadline = wire::deadline_after(std::chrono::seconds(10));
  EXPECT_EQ(wire::recv_header(fd, deadline, "test: hello reply").status, 0u);
  wire::send_frame(fd, join_frame(shard, id), nullptr, deadline, "test: join");
  const wire::Header r = wire::recv_header(fd, deadline, "test: state");
  EXPECT_EQ(r.op, wire::kJoin | wire::kReply);
  EXPECT_EQ(r.status, 0u);
  return r;
}

}  // namespace braid::testing::ps_join
