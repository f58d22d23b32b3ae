// A replacement server joins chains by state transfer, in real processes:
// 2 workers train a model with a dense and a sparse key through 3 servers
// with BSP, every shard on a chain of 2 (shard s on servers s and s+1 mod 3).
// Server 1 (tail of shard 0, head of shard 1) is SIGKILLed mid-training; a
// replacement process then joins the chains of shards 0 and 1 as their new
// tail while the workers keep pushing, and training goes on through it.
// Asserted: training completes; per shard, the pushes and clocks the workers
// had acknowledged equal what the tail (for shards 0 and 1 the replacement)
// applied; the replacement served reads; every replica's full state
// (parameters, optimizer state, counts, clocks, request ids, buffered rounds,
// reports) equals the other member's of its shard bit for bit; and the final
// parameters are bit for bit those of the same job without a failure.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "braid/checkpoint.h"
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

const std::string kSecret = "ps-join-secret-0123456789";
constexpr int kServers = 3, kWorkers = 2, kSteps = 30, kKillAt = 6, kJoinBy = 16;
constexpr int kVictim = 1;
constexpr int64_t kRows = 12, kWidth = 3;
constexpr auto kDeadline = 60s;

ps::Layout layout() {
  ps::Layout l(kServers);
  l.add_dense("w", 11);
  l.add_dense("b", 5, false);
  l.add_sparse("emb", kRows, kWidth);
  return l;
}

std::vector<std::vector<float>> init_values() {
  std::vector<std::vector<float>> init{std::vector<float>(11), std::vector<float>(5), {}};
  for (size_t k = 0; k < 2; ++k)
    for (size_t i = 0; i < init[k].size(); ++i) init[k][i] = 0.1f * float(i) - 0.3f * float(k);
  return init;
}

// Set before a job starts; its forked ranks inherit it.
ps::Consistency g_consistency = ps::Consistency::kBsp;

// Under SSP the workers follow a script (see SspOpenRoundsAreTransferred),
// so that what every pull reads, and which rounds are open at the join,
// does not depend on timing.
bool scripted() { return g_consistency == ps::Consistency::kSsp; }
std::string pushed_key(int w, int64_t c) {
  return "test/pushed/" + std::to_string(w) + "/" + std::to_string(c);
}

ps::ServerOptions server_options(int rank, int replicas) {
  ps::ServerOptions o;
  o.rank = rank;
  o.consistency = g_consistency;
  o.staleness = g_consistency == ps::Consistency::kSsp ? 2 : 0;
  o.workers = kWorkers;
  o.replicas = replicas;
  o.secret = kSecret;
  o.rule.kind = ps::UpdateRule::kSgd;
  o.rule.momentum = 0.5f;
  o.lr.base = 0.05f;
  o.timeout = kDeadline;
  return o;
}

// Worker w's sparse rows at round c.
std::vector<int64_t> rows_of(int w, int64_t c) {
  return {c % kRows, (c * 5 + w) % kRows, 7};
}

// Waits for every worker's goodbye, then writes each replica it keeps to
// DIR/p<id>-s<shard>.ckpt.
void finish_server(ps::Server& srv, int id, const std::string& dir) {
  srv.wait_finished(kDeadline);
  for (int s : srv.shards())
    srv.save_state(s, dir + "/p" + std::to_string(id) + "-s" + std::to_string(s) + ".ckpt");
}

void run_server(int s, int replicas, bool kill, std::shared_ptr<braid::Store> store,
                const std::string& dir) {
  ps::Server srv(layout(), server_options(s, replicas), store, init_values());
  for (;;) {
    if (kill && s == kVictim && store->check("test/kill")) {
      store->set_str("test/killed", "1");
      ::kill(::getpid(), SIGKILL);
    }
    try {
      srv.wait_finished(100ms);
      break;
    } catch (const braid::Error& e) {
      if (e.code() != braid::Errc::kTimeout) throw;
    }
  }
  finish_server(srv, s, dir);
}

// The replacement: joins the chains the victim was the tail and the head of
// (scripted: once worker 1 has pushed rounds kJoinBy and kJoinBy + 1, which
// worker 0 has not, so both are open at every member of every chain).
void run_replacement(std::shared_ptr<braid::Store> store, const std::string& dir) {
  store->wait({"test/killed"}, kDeadline);
  if (scripted()) store->wait({"test/ahead"}, kDeadline);
  const int id = ps::replacement_id(*store, kServers);
  EXPECT_EQ(id, kServers);
  ps::ServerOptions o = server_options(id, 2);
  o.join = {0, 1};
  ps::Server srv(layout(), o, store, init_values());
  const std::vector<ps::JoinReport> joins = srv.joins();
  EXPECT_EQ(joins.size(), 2u);
  for (const ps::JoinReport& j : joins) {
    if (!scripted()) continue;
    EXPECT_EQ(j.open_rounds, 2) << "shard " << j.shard << ": rounds " << kJoinBy << " and "
                                << kJoinBy + 1 << " were open at its tail " << j.tail;
  }
  store->set_str("test/joined", "1");
  finish_server(srv, id, dir);
  // Reads moved to it: it served sparse rows of both shards (a read counter,
  // which the transfer does not carry).
  EXPECT_GT(srv.shard_stats(0).pulls_owner, 0);
  EXPECT_GT(srv.shard_stats(1).pulls_owner, 0);
}

void run_worker(int w, int replicas, bool kill, std::shared_ptr<braid::Store> store,
                const std::string& out) {
  ps::WorkerOptions o;
  o.rank = w;
  o.replicas = replicas;
  o.secret = kSecret;
  o.timeout = kDeadline;
  ps::Worker worker(layout(), o, store);
  std::vector<std::vector<float>> p = init_values(), g = p;
  p[2].assign(size_t(3 * kWidth), 0.0f);
  g[2] = p[2];
  auto keys = [](std::vector<std::vector<float>>& v, const std::vector<int64_t>& rows) {
    return std::vector<ps::KeyData>{{0, {}, v[0].data()}, {1, {}, v[1].data()}, {2, rows, v[2].data()}};
  };
  worker.pull(keys(p, rows_of(w, 0)), 0);
  for (int64_t c = 0; c < kSteps; ++c) {
    if (kill && w == 0 && c == kKillAt) {
      store->set_str("test/kill", "1");
      store->wait({"test/killed"}, kDeadline);
    }
    // The join runs while both workers push; worker 0 then makes sure it
    // finished, so the rest of the job trains through the replacement.
    // Scripted, worker 0 pushes round kJoinBy only after the join (or,
    // without one, once worker 1 is as far ahead).
    if (w == 0 && c == kJoinBy) {
      if (kill)
        store->wait({"test/joined"}, kDeadline);
      else if (scripted())
        store->wait({"test/ahead"}, kDeadline);
    }
    gradient(w, c, p, g);
    worker.report(c, double(c), 1.0, 0.0);
    if (!scripted()) {
      worker.push_pull(keys(g, rows_of(w, c)), keys(p, rows_of(w, c + 1)), c);
      continue;
    }
    // A push returns once the chain acknowledged it (applied at every
    // member), so when both workers have pushed round c it is closed at
    // every tail, and the pull for c + 1 reads exactly rounds 0..c. But
    // worker 1's pull for kJoinBy + 1 reads ahead, as SSP lets it, before
    // round kJoinBy closed: exactly rounds 0..kJoinBy - 1, since worker 0
    // waits for the "test/ahead" that worker 1 posts after pushing round
    // kJoinBy + 1.
    worker.push(keys(g, rows_of(w, c)), c, true);
    store->set_str(pushed_key(w, c), "1");
    if (w == 1 && c == kJoinBy + 1) store->set_str("test/ahead", "1");
    if (!(w == 1 && c == kJoinBy)) store->wait({pushed_key(1 - w, c)}, kDeadline);
    worker.pull(keys(p, rows_of(w, c + 1)), c + 1);
  }
  const ps::WorkerStats ws = worker.worker_stats();
  store->set_str("test/pushes/" + std::to_string(w), encode(ws.pushes_acked));
  store->set_str("test/clocks/" + std::to_string(w), encode(ws.clocks_acked));
  if (w == 0) {
    // One death and two joins.
    const uint32_t epoch = kill ? 3 : 0;
    EXPECT_EQ(ws.epoch, epoch);
    std::vector<int64_t> pushes(kServers, 0);
    for (int v = 0; v < kWorkers; ++v) {
      const std::string sv = std::to_string(v);
      store->wait({"test/pushes/" + sv, "test/clocks/" + sv}, kDeadline);
      const std::vector<int64_t> pv = decode(store->get_str("test/pushes/" + sv));
      const std::vector<int64_t> cv = decode(store->get_str("test/clocks/" + sv));
      ASSERT_EQ(pv.size(), size_t(kServers));
      for (int s = 0; s < kServers; ++s) {
        pushes[size_t(s)] += pv[size_t(s)];
        EXPECT_EQ(cv[size_t(s)], kSteps) << "worker " << v << ", shard " << s;
      }
    }
    for (int s = 0; s < kServers; ++s) {
      const ps::ServerStats st = worker.stats(s);  // from the shard's tail
      EXPECT_EQ(st.pushes_accepted, pushes[size_t(s)]) << "shard " << s;
      EXPECT_EQ(st.updates_applied, kSteps) << "shard " << s;
      EXPECT_EQ(st.rounds_closed, kSteps) << "shard " << s;
      EXPECT_EQ(st.epoch, int64_t(epoch)) << "shard " << s;
    }
    std::ofstream f(out, std::ios::binary);
    for (const auto& v : p)
      f.write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * 4));
  }
  worker.finish();
}

struct Job {
  std::string params;  // worker 0's final parameters
  std::string dir;     // the replicas' states
};

Job run_job(int replicas, bool kill) {
  Job job;
  job.dir = braid::testing::temp_dir("ps_join");
  const std::string out = job.dir + "/params.bin";
  const int n = kWorkers + kServers + (kill ? 1 : 0);
  auto results = braid::testing::run_ranks(
      n,
      [&](int rank, int, std::shared_ptr<braid::Store> store) {
        if (rank < kWorkers)
          run_worker(rank, replicas, kill, store, out);
        else if (rank < kWorkers + kServers)
          run_server(rank - kWorkers, replicas, kill, store, job.dir);
        else
          run_replacement(store, job.dir);
      },
      120s);
  for (const auto& r : results) {
    if (kill && r.rank - kWorkers == kVictim) {
      EXPECT_EQ(r.signal, SIGKILL) << "the victim server was to be killed mid-training";
      continue;
    }
    EXPECT_TRUE(r.exit_code == 0 && r.signal == 0)
        << "rank " << r.rank << " failed (exit " << r.exit_code << ", signal " << r.signal
        << "): " << r.output;
  }
  std::ifstream f(out, std::ios::binary);
  job.params = std::string(std::istreambuf_iterator<char>(f), {});
  return job;
}

// A sparse key's rows as row -> its weights then its optimizer state.
std::map<int64_t, std::vector<float>> sparse_rows(const braid::Checkpoint& ck) {
  std::map<int64_t, std::vector<float>> rows;
  auto it = ck.tensors.find("sparse/emb/rows");
  if (it == ck.tensors.end()) return rows;
  const int64_t n = it->second.numel() / 2;
  const auto* ids = static_cast<const int64_t*>(it->second.raw());
  const auto* w = static_cast<const float*>(ck.tensors.at("sparse/emb/w").raw());
  const auto* st = static_cast<const float*>(ck.tensors.at("sparse/emb/state").raw());
  for (int64_t i = 0; i < n; ++i) {
    std::vector<float>& r = rows[ids[i]];
    r.assign(w + i * kWidth, w + (i + 1) * kWidth);
    r.insert(r.end(), st + i * kWidth, st + (i + 1) * kWidth);  // momentum: one slot
  }
  return rows;
}

// Two replicas' states are equal: every meta entry and dense tensor bit for
// bit, and every sparse row's weights and state. A server creates a sparse
// row on its first touch, a read included, and only the tail serves reads,
// so replicas may hold rows in another order, or one a row that was only
// read (still at its initial zeros): rows are compared by id.
void expect_same_state(const std::string& a, const std::string& b) {
  braid::Checkpoint x = braid::load_checkpoint(a), y = braid::load_checkpoint(b);
  std::map<int64_t, std::vector<float>> xs = sparse_rows(x), ys = sparse_rows(y);
  for (auto* ck : {&x, &y}) {
    ck->meta.erase("sparse/emb/rows");
    for (const char* t : {"sparse/emb/rows", "sparse/emb/w", "sparse/emb/state"}) ck->tensors.erase(t);
  }
  EXPECT_EQ(x.meta, y.meta) << a << " vs " << b;
  ASSERT_EQ(x.tensors.size(), y.tensors.size()) << a << " vs " << b;
  for (const auto& [name, t] : x.tensors) {
    auto it = y.tensors.find(name);
    ASSERT_NE(it, y.tensors.end()) << b << " lacks " << name;
    ASSERT_EQ(t.nbytes(), it->second.nbytes()) << name;
    EXPECT_EQ(std::memcmp(t.raw(), it->second.raw(), t.nbytes()), 0) << name;
  }
  const std::vector<float> untouched(size_t(2 * kWidth), 0.0f);
  EXPECT_FALSE(xs.empty()) << a;
  for (auto [one, other] : {std::pair{&xs, &ys}, std::pair{&ys, &xs}})
    for (const auto& [row, v] : *one) {
      auto it = other->find(row);
      EXPECT_EQ(v, it == other->end() ? untouched : it->second) << a << " vs " << b << ", row " << row;
    }
}

// Shard s's live members at the end: 0 -> {0, 3}, 1 -> {2, 3}, 2 -> {2, 0}.
void expect_replicas_equal(const Job& job) {
  const std::map<int, std::pair<int, int>> members{{0, {0, 3}}, {1, {2, 3}}, {2, {2, 0}}};
  for (const auto& [s, m] : members) {
    auto file = [&, s = s](int p) {
      return job.dir + "/p" + std::to_string(p) + "-s" + std::to_string(s) + ".ckpt";
    };
    ASSERT_TRUE(std::filesystem::exists(file(m.first))) << file(m.first);
    ASSERT_TRUE(std::filesystem::exists(file(m.second))) << file(m.second);
    expect_same_state(file(m.first), file(m.second));
  }
}

TEST(PsChainJoin, ReplacementCatchesUpAndTrainsOn) {
  g_consistency = ps::Consistency::kBsp;
  const Job base = run_job(1, false), joined = run_job(2, true);
  ASSERT_EQ(base.params.size(), size_t((16 + 3 * kWidth) * 4));
  EXPECT_EQ(joined.params, base.params);
  expect_replicas_equal(joined);
}

// SSP with staleness 2: worker 1 runs two rounds ahead (kJoinBy and
// kJoinBy + 1, reading for the second before the first closed) while worker
// 0 waits for the join, so every tail holds both rounds open, buffered,
// and the transfer must carry them (the replacement checks its
// JoinReport::open_rounds). The workers follow a script (run_worker), so
// every pull reads the same rounds in both jobs: the final parameters equal,
// bit for bit, those of the same script without a failure and with R = 1.
TEST(PsChainJoin, SspOpenRoundsAreTransferred) {
  g_consistency = ps::Consistency::kSsp;
  const Job base = run_job(1, false), joined = run_job(2, true);
  ASSERT_EQ(base.params.size(), size_t((16 + 3 * kWidth) * 4));
  EXPECT_EQ(joined.params, base.params);
  expect_replicas_equal(joined);
}

// Bad input: a join that cannot be served is refused with a clear error.
TEST(PsChainJoin, RejectsBadJoins) {
  braid::testing::expect_all_pass(1, [](int, int, std::shared_ptr<braid::Store> store) {
    ps::ServerOptions o = server_options(kServers, 1);
    o.join = {0};
    try {
      ps::Server srv(layout(), o, store, init_values());
      ADD_FAILURE() << "a join with replicas 1 was accepted";
    } catch (const braid::Error& e) {
      EXPECT_EQ(e.code(), braid::Errc::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("replicas >= 2"), std::string::npos) << e.what();
    }
    o = server_options(1, 2);
    o.join = {0};
    try {
      ps::Server srv(layout(), o, store, init_values());
      ADD_FAILURE() << "a join under an original server's id was accepted";
    } catch (const braid::Error& e) {
      EXPECT_NE(std::string(e.what()).find("replacement's id"), std::string::npos) << e.what();
    }
    o = server_options(kServers, 2);
    o.join = {0, 0};
    try {
      ps::Server srv(layout(), o, store, init_values());
      ADD_FAILURE() << "a repeated shard was accepted";
    } catch (const braid::Error& e) {
      EXPECT_NE(std::string(e.what()).find("distinct"), std::string::npos) << e.what();
    }
  });
}

}  // namespace
