// Hot-key read replicas (ps.h "Hot keys") in real processes: 3 servers and
// 2 workers pull Zipf-distributed rows of one sparse table under BSP and
// push gradients for them. The same job runs with and without hot keys:
// every pulled value is equal (BSP makes replicas exact), the hot rows are
// among the most-pulled ones, replicas served pulls, and the owner of the
// hottest row served fewer pulls with replication than without.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <map>
#include <random>
#include <set>

#include "braid/error.h"
#include "braid/ps.h"
#include "support/multiproc.h"

namespace {

using namespace std::chrono_literals;
namespace ps = braid::ps;

const std::string kSecret = "ps-hotkey-secret-0123456789";
constexpr int kServers = 3, kWorkers = 2, kRounds = 8, kBatch = 256, kRefreshAt = 2;
constexpr int64_t kRows = 1000, kWidth = 4;

ps::Layout layout() {
  ps::Layout l(kServers);
  l.add_sparse("emb", kRows, kWidth);
  return l;
}

// Row ids drawn from Zipf(1.2) over kRows, deterministic per worker and round.
std::vector<int64_t> batch(int w, int64_t round) {
  std::vector<double> cdf(kRows);
  double sum = 0;
  for (int64_t r = 0; r < kRows; ++r) cdf[size_t(r)] = (sum += 1.0 / std::pow(double(r + 1), 1.2));
  std::mt19937_64 gen(uint64_t(w) * 1000 + uint64_t(round));
  std::uniform_real_distribution<double> u(0, sum);
  std::vector<int64_t> rows(kBatch);
  for (auto& r : rows) r = int64_t(std::lower_bound(cdf.begin(), cdf.end(), u(gen)) - cdf.begin());
  return rows;
}

void run_server(int s, bool hot, std::shared_ptr<braid::Store> store) {
  ps::ServerOptions o;
  o.rank = s;
  o.workers = kWorkers;
  o.secret = kSecret;
  o.lr.base = 0.1f;
  o.timeout = 60s;
  o.hot_keys = hot;
  o.hot_max_rows = 2;
  ps::Server srv(layout(), o, store, {{}},
                 [](ps::KeyId, int64_t row, float* out) {
                   for (int64_t i = 0; i < kWidth; ++i) out[i] = float(row % 13) * 0.1f + float(i);
                 });
  srv.wait_finished(60s);
}

void run_worker(int w, bool hot, std::shared_ptr<braid::Store> store, const std::string& dir) {
  ps::WorkerOptions o;
  o.rank = w;
  o.secret = kSecret;
  o.timeout = 60s;
  ps::Worker worker(layout(), o, store);
  std::ofstream values(dir + "/values" + std::to_string(w), std::ios::binary);
  for (int64_t c = 0; c < kRounds; ++c) {
    const std::vector<int64_t> rows = batch(w, c);
    std::vector<float> p(rows.size() * kWidth);
    worker.pull({{0, rows, p.data()}}, c);
    // After this pull exactly kRefreshAt rounds are closed (BSP), so both
    // workers learn the same hot set.
    if (hot && c == kRefreshAt) {
      EXPECT_GT(worker.refresh_hot(), 0);
    }
    values.write(reinterpret_cast<const char*>(p.data()), std::streamsize(p.size() * 4));
    std::map<int64_t, float> mult;
    for (int64_t r : rows) mult[r] += 1;
    std::vector<int64_t> ids;
    std::vector<float> g;
    for (const auto& [r, m] : mult) {
      ids.push_back(r);
      for (int64_t i = 0; i < kWidth; ++i) g.push_back(0.01f * m * float(i + 1 + w));
    }
    worker.push({{0, ids, g.data()}}, c, true);
  }
  if (w == 0) {
    std::ofstream st(dir + "/stats");
    for (int s = 0; s < kServers; ++s) {
      // After the last round closed: every worker's pulls are counted.
      const ps::ServerStats x = worker.stats(s, kRounds - 1, true);
      st << x.pulls_owner << ' ' << x.pulls_replica << ' ' << x.hot_rows << '\n';
    }
    std::ofstream hr(dir + "/hot");
    for (const auto& [k, r] : worker.hot_rows()) hr << r << '\n';
  }
  worker.finish();
}

struct Result {
  std::string values;
  std::vector<std::array<int64_t, 3>> stats;  // per server: owner, replica, hot rows
  std::vector<int64_t> hot;
};

Result run_job(bool hot) {
  const std::string dir = braid::testing::temp_dir("ps_hotkey");
  auto results = braid::testing::run_ranks(
      kWorkers + kServers,
      [&](int rank, int, std::shared_ptr<braid::Store> store) {
        if (rank < kWorkers)
          run_worker(rank, hot, store, dir);
        else
          run_server(rank - kWorkers, hot, store);
      },
      120s);
  for (const auto& r : results)
    EXPECT_TRUE(r.exit_code == 0 && r.signal == 0)
        << "rank " << r.rank << " failed (exit " << r.exit_code << ", signal " << r.signal
        << "): " << r.output;
  Result res;
  for (int w = 0; w < kWorkers; ++w) {
    std::ifstream f(dir + "/values" + std::to_string(w), std::ios::binary);
    res.values += std::string(std::istreambuf_iterator<char>(f), {});
  }
  std::ifstream st(dir + "/stats");
  std::array<int64_t, 3> a{};
  while (st >> a[0] >> a[1] >> a[2]) res.stats.push_back(a);
  std::ifstream hr(dir + "/hot");
  int64_t r = 0;
  while (hr >> r) res.hot.push_back(r);
  return res;
}

TEST(PsHotKeys, ReplicasServeHotRowsWithBspResultsUnchanged) {
  const Result off = run_job(false), on = run_job(true);
  ASSERT_EQ(off.values.size(), size_t(kWorkers * kRounds * kBatch * kWidth * 4));
  EXPECT_EQ(off.values, on.values) << "BSP pulls from replicas must equal the owner's";
  ASSERT_EQ(off.stats.size(), size_t(kServers));
  ASSERT_EQ(on.stats.size(), size_t(kServers));
  EXPECT_TRUE(off.hot.empty());

  // Pull counts per row over the rounds before the refresh (what the servers
  // had counted when the workers learned the hot set).
  std::map<int64_t, int64_t> count;
  for (int w = 0; w < kWorkers; ++w)
    for (int64_t c = 0; c < kRefreshAt; ++c)
      for (int64_t r : batch(w, c)) ++count[r];
  std::vector<std::pair<int64_t, int64_t>> by_count;
  for (const auto& [r, n] : count) by_count.push_back({n, r});
  std::sort(by_count.rbegin(), by_count.rend());
  const int64_t hottest = by_count[0].second;
  std::set<int64_t> top;
  for (size_t i = 0; i < 10; ++i) top.insert(by_count[i].second);

  ASSERT_FALSE(on.hot.empty());
  EXPECT_LE(on.hot.size(), size_t(2 * kServers));  // hot_max_rows per server
  EXPECT_NE(std::find(on.hot.begin(), on.hot.end(), hottest), on.hot.end());
  for (int64_t r : on.hot) EXPECT_TRUE(top.count(r)) << "row " << r << " is cold but was made hot";
  int64_t hot_total = 0, replica_total = 0;
  for (int s = 0; s < kServers; ++s) {
    hot_total += on.stats[size_t(s)][2];
    replica_total += on.stats[size_t(s)][1];
    EXPECT_EQ(off.stats[size_t(s)][1], 0) << "server " << s;
    EXPECT_EQ(off.stats[size_t(s)][2], 0) << "server " << s;
  }
  // Servers may add rows after the workers' refresh; never past the cap.
  EXPECT_GE(hot_total, int64_t(on.hot.size()));
  EXPECT_LE(hot_total, int64_t(2 * kServers));
  // Every pull of a hot row after the refresh went to a replica.
  int64_t hot_pulls = 0;
  const std::set<int64_t> hot(on.hot.begin(), on.hot.end());
  for (int w = 0; w < kWorkers; ++w)
    for (int64_t c = kRefreshAt + 1; c < kRounds; ++c)
      for (int64_t r : batch(w, c)) hot_pulls += hot.count(r);
  EXPECT_EQ(replica_total, hot_pulls);
  EXPECT_EQ(on.stats[0][0] + on.stats[1][0] + on.stats[2][0] + replica_total,
            off.stats[0][0] + off.stats[1][0] + off.stats[2][0]);
  const int owner = layout().row_server(hottest);
  EXPECT_LT(on.stats[size_t(owner)][0], off.stats[size_t(owner)][0]);
}

TEST(PsHotKeys, RefusedUnderAsp) {
  auto store = braid::make_file_store(braid::testing::temp_dir("ps_hotkey_asp"));
  ps::ServerOptions o;
  o.secret = kSecret;
  o.consistency = ps::Consistency::kAsp;
  o.hot_keys = true;
  try {
    ps::Server srv(layout(), o, store, {{}});
    ADD_FAILURE() << "hot keys under ASP were accepted";
  } catch (const braid::Error& e) {
    EXPECT_EQ(e.code(), braid::Errc::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("hot keys need bsp or ssp"), std::string::npos) << e.what();
  }
}

}  // namespace
