// Chain replication in real processes: 2 workers train a small model through
// 3 servers with BSP, every shard on a chain of 2 (shard s on servers s and
// s+1 mod 3). A server process is SIGKILLed mid-training (it is the head of
// one chain and the tail of another; the tests pick it by its role for
// shard 0). Training completes; per shard, the pushes and clocks each
// worker had acknowledged equal what the surviving tail applied, exactly;
// the workers re-routed within their deadline; and the final parameters are
// bit-for-bit those of the same job with R = 1 and with R = 2 without a
// failure (replication and fail-over do not change the math).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "braid/error.h"
#include "braid/ps.h"
#include "chain_test_util.h"
#include "support/multiproc.h"

namespace {

using namespace std::chrono_literals;
namespace ps = braid::ps;
using braid::testing::ps_chain::decode;
using braid::testing::ps_chain::encode;
using braid::testing::ps_chain::gradient;

const std::string kSecret = "ps-chain-secret-0123456789";
constexpr int kServers = 3, kWorkers = 2, kSteps = 24, kKillAt = 9;
constexpr auto kDeadline = 60s;

ps::Layout layout() {
  ps::Layout l(kServers);
  l.add_dense("w", 11);
  l.add_dense("b", 5, false);
  return l;
}

std::vector<std::vector<float>> init_values() {
  std::vector<std::vector<float>> init{std::vector<float>(11), std::vector<float>(5)};
  for (size_t k = 0; k < init.size(); ++k)
    for (size_t i = 0; i < init[k].size(); ++i) init[k][i] = 0.1f * float(i) - 0.3f * float(k);
  return init;
}

void run_server(int s, int replicas, int victim, std::shared_ptr<braid::Store> store) {
  ps::ServerOptions o;
  o.rank = s;
  o.workers = kWorkers;
  o.replicas = replicas;
  o.secret = kSecret;
  o.rule.kind = ps::UpdateRule::kSgd;
  o.rule.momentum = 0.5f;
  o.lr.base = 0.05f;
  o.timeout = kDeadline;
  ps::Server srv(layout(), o, store, init_values());
  for (;;) {
    if (s == victim && store->check("test/kill")) {
      store->set_str("test/killed", "1");
      ::kill(::getpid(), SIGKILL);
    }
    try {
      srv.wait_finished(100ms);
      return;
    } catch (const braid::Error& e) {
      if (e.code() != braid::Errc::kTimeout) throw;
    }
  }
}

void run_worker(int w, int replicas, int victim, std::shared_ptr<braid::Store> store,
                const std::string& out) {
  const ps::Layout l = layout();
  ps::WorkerOptions o;
  o.rank = w;
  o.replicas = replicas;
  o.secret = kSecret;
  o.timeout = kDeadline;
  ps::Worker worker(l, o, store);
  std::vector<std::vector<float>> p = init_values(), g = p;
  auto keys = [](std::vector<std::vector<float>>& v) {
    return std::vector<ps::KeyData>{{0, {}, v[0].data()}, {1, {}, v[1].data()}};
  };
  worker.pull(keys(p), 0);
  for (int64_t c = 0; c < kSteps; ++c) {
    if (w == 0 && c == kKillAt && victim >= 0) {
      store->set_str("test/kill", "1");
      store->wait({"test/killed"}, kDeadline);
    }
    gradient(w, c, p, g);
    worker.push_pull(keys(g), keys(p), c);
  }
  const ps::WorkerStats ws = worker.worker_stats();
  store->set_str("test/pushes/" + std::to_string(w), encode(ws.pushes_acked));
  store->set_str("test/clocks/" + std::to_string(w), encode(ws.clocks_acked));
  store->set_str("test/reroutes/" + std::to_string(w), std::to_string(ws.reroutes));
  EXPECT_LT(ws.max_reroute_s, double(kDeadline.count()));
  if (w == 0) {
    const uint32_t epoch = victim >= 0 ? 1 : 0;
    EXPECT_EQ(ws.epoch, epoch);
    int64_t reroutes = 0;
    std::vector<int64_t> pushes(kServers, 0);
    for (int v = 0; v < kWorkers; ++v) {
      const std::string sw = std::to_string(v);
      store->wait({"test/pushes/" + sw, "test/clocks/" + sw, "test/reroutes/" + sw}, kDeadline);
      const std::vector<int64_t> pv = decode(store->get_str("test/pushes/" + sw));
      const std::vector<int64_t> cv = decode(store->get_str("test/clocks/" + sw));
      ASSERT_EQ(pv.size(), size_t(kServers));
      for (int s = 0; s < kServers; ++s) {
        pushes[size_t(s)] += pv[size_t(s)];
        EXPECT_EQ(cv[size_t(s)], kSteps) << "worker " << v << ", shard " << s;
      }
      reroutes += std::stoll(store->get_str("test/reroutes/" + sw));
    }
    if (victim >= 0) {
      EXPECT_GE(reroutes, 1);
    }
    for (int s = 0; s < kServers; ++s) {
      // Served by the shard's (surviving) tail.
      const ps::ServerStats st = worker.stats(s);
      EXPECT_EQ(st.rank, s);
      EXPECT_EQ(st.pushes_accepted, pushes[size_t(s)]) << "shard " << s;
      EXPECT_EQ(st.updates_applied, kSteps) << "shard " << s;
      EXPECT_EQ(st.rounds_closed, kSteps) << "shard " << s;
      EXPECT_EQ(st.epoch, int64_t(epoch)) << "shard " << s;
    }
    std::ofstream f(out, std::ios::binary);
    for (const auto& v : p) f.write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * 4));
  }
  worker.finish();
}

// Runs the job; returns the final parameters worker 0 wrote.
std::string run_job(int replicas, int victim) {
  const std::string out = braid::testing::temp_dir("ps_chain") + "/params.bin";
  auto results = braid::testing::run_ranks(
      kWorkers + kServers,
      [&](int rank, int, std::shared_ptr<braid::Store> store) {
        if (rank < kWorkers)
          run_worker(rank, replicas, victim, store, out);
        else
          run_server(rank - kWorkers, replicas, victim, store);
      },
      120s);
  for (const auto& r : results) {
    if (victim >= 0 && r.rank - kWorkers == victim) {
      EXPECT_EQ(r.signal, SIGKILL) << "the victim server was to be killed mid-training";
      continue;
    }
    EXPECT_TRUE(r.exit_code == 0 && r.signal == 0)
        << "rank " << r.rank << " failed (exit " << r.exit_code << ", signal " << r.signal
        << "): " << r.output;
  }
  std::ifstream f(out, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

TEST(PsChain, ReplicationDoesNotChangeBspResult) {
  const std::string r1 = run_job(1, -1), r2 = run_job(2, -1);
  ASSERT_EQ(r1.size(), size_t(16 * 4));
  EXPECT_EQ(r1, r2);
}

// Server 0 is the head of shard 0's chain (and the tail of shard 2's).
TEST(PsChain, KillHeadMidTraining) {
  const std::string base = run_job(1, -1), killed = run_job(2, 0);
  ASSERT_EQ(base.size(), size_t(16 * 4));
  EXPECT_EQ(killed, base);
}

// Server 1 is the tail of shard 0's chain (and the head of shard 1's).
TEST(PsChain, KillTailMidTraining) {
  const std::string base = run_job(1, -1), killed = run_job(2, 1);
  ASSERT_EQ(base.size(), size_t(16 * 4));
  EXPECT_EQ(killed, base);
}

}  // namespace
