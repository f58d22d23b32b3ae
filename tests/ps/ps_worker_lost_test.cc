// Lost workers through the ps API, with real processes: one server and two
// workers meeting through a store.
//
// A worker SIGKILLed after connecting, before its goodbye: the other
// worker, parked in a BSP pull for the round the dead one never pushed,
// fails with kPeerDied naming the lost worker, the server and its own pull
// (not kTimeout: every wait here may take 60 s), and so does the server's
// wait for the goodbyes.
//
// Not lost: a worker the server drops for a bad request (the server closed
// that connection, not the worker), which then connects again well after
// the grace, and a worker that says goodbye and exits. That job finishes.
#include <signal.h>

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "braid/error.h"
#include "braid/ps.h"
#include "support/multiproc.h"

namespace {

using namespace std::chrono_literals;
namespace ps = braid::ps;

const std::string kSecret = "ps-worker-lost-test-secret";

ps::Layout layout(int64_t n) {
  ps::Layout l(1);
  l.add_dense("w", n);
  return l;
}

ps::ServerOptions server_options(ps::Consistency c, std::chrono::milliseconds timeout) {
  ps::ServerOptions o;
  o.workers = 2;
  o.consistency = c;
  o.lr.base = 0.5f;
  o.secret = kSecret;
  o.timeout = timeout;
  return o;
}

ps::WorkerOptions worker_options(int rank) {
  ps::WorkerOptions wo;
  wo.rank = rank;
  wo.secret = kSecret;
  wo.timeout = 60s;
  return wo;
}

TEST(PsWorkerLost, AKilledWorkerFailsTheWaitingWorkerAndTheServerNamingIt) {
  const auto results = braid::testing::run_ranks(3, [](int rank, int, std::shared_ptr<braid::Store> store) {
    const ps::Layout l = layout(4);
    if (rank == 0) {
      ps::Server server(l, server_options(ps::Consistency::kBsp, 60s), store, {{1, 2, 3, 4}}, {});
      try {
        server.wait_finished(60s);
        ADD_FAILURE() << "the server's wait for the goodbyes ended without worker 1's";
      } catch (const braid::Error& e) {
        EXPECT_EQ(e.code(), braid::Errc::kPeerDied) << e.what();
        EXPECT_NE(std::string(e.what()).find("worker 1 was lost at clock 0: its connection to "
                                             "parameter server 0 (shard 0) closed without a "
                                             "goodbye"),
                  std::string::npos)
            << e.what();
      }
      store->wait({"w0/done"}, 60s);
      return;
    }
    std::vector<float> w(4), g = {1, 1, 1, 1};
    if (rank == 1) {  // worker 1: connects, then dies without a word
      ps::Worker worker(l, worker_options(1), store);
      worker.pull({{0, {}, w.data()}}, 0);
      store->set_str("w1/connected", "1");
      ::raise(SIGKILL);
    }
    ps::Worker worker(l, worker_options(0), store);
    store->wait({"w1/connected"}, 60s);
    worker.push({{0, {}, g.data()}}, 0, true);
    try {
      worker.pull({{0, {}, w.data()}}, 1);  // round 0 needs worker 1's push
      ADD_FAILURE() << "a pull of round 1 returned without worker 1's push of round 0";
    } catch (const braid::Error& e) {
      const std::string m = e.what();
      EXPECT_EQ(e.code(), braid::Errc::kPeerDied) << m;
      EXPECT_NE(m.find("parameter server 0, worker 0, pull for clock 1"), std::string::npos) << m;
      EXPECT_NE(m.find("worker 1 was lost at clock 0"), std::string::npos) << m;
    }
    store->set_str("w0/done", "1");
  }, 120s);
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(results[0].exit_code, 0) << results[0].output;
  EXPECT_EQ(results[1].signal, SIGKILL) << results[1].output;
  EXPECT_EQ(results[2].exit_code, 0) << results[2].output;
}

TEST(PsWorkerLost, AWorkerDroppedForABadRequestOrSayingGoodbyeIsNotLost) {
  braid::testing::expect_all_pass(3, [](int rank, int, std::shared_ptr<braid::Store> store) {
    const ps::Layout l = layout(4);
    std::vector<float> w(4), g = {1, 1, 1, 1};
    if (rank == 0) {
      // A 4 s timeout: the grace before a drop counts as a loss is 1 s.
      ps::Server server(l, server_options(ps::Consistency::kAsp, 4s), store, {{1, 2, 3, 4}}, {});
      server.wait_finished(60s);  // throws if a worker was found lost
      EXPECT_EQ(server.stats().pushes_accepted, 2);
      EXPECT_GE(server.stats().rejected, 1);
      return;
    }
    if (rank == 1) {
      {  // a layout unlike the server's: a push outside its slice, refused
        std::vector<float> big(8, 1.0f);
        ps::Worker bad(layout(8), worker_options(1), store);
        try {
          bad.push({{0, {}, big.data()}}, 0, true);
          ADD_FAILURE() << "the server took a push outside its slice";
        } catch (const braid::Error& e) {
          EXPECT_EQ(e.code(), braid::Errc::kInvalidArgument) << e.what();
        }
      }
      // Well past the grace with worker 1 connected nowhere.
      std::this_thread::sleep_for(2500ms);
      ps::Worker worker(l, worker_options(1), store);
      worker.push({{0, {}, g.data()}}, 0, true);
      worker.finish();
      store->set_str("w1/bye", "1");
      return;
    }
    ps::Worker worker(l, worker_options(0), store);
    worker.push({{0, {}, g.data()}}, 0, true);
    store->wait({"w1/bye"}, 60s);
    const ps::ServerStats st = worker.final_stats(0);
    EXPECT_EQ(st.pushes_accepted, 2);
    worker.finish();
  }, 120s);
}

}  // namespace
