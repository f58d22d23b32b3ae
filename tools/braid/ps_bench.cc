// braid ps bench — push_pull throughput of the parameter server with S
// dedicated servers and W workers (ranks 0..W-1 workers, W..W+S-1 servers),
// forked as `braid ps train` forks them.
//
//  --mode dense:  one dense key of --bytes (cut into S slices); each
//                 iteration is one push_pull of the whole key. Reported as
//                 algbw = bytes / time per push_pull (per worker, the mean
//                 over workers), the figure braid bench gives all_reduce.
//  --mode sparse: one table of --rows rows of --row-bytes each; each
//                 iteration pushes and pulls --keys distinct rows, drawn
//                 uniformly (a fresh draw per iteration, seeded per worker).
//                 Reported as keys/s per server = W · keys · iters / time /
//                 S, a key being one row pushed and pulled.
// Servers run ASP with plain SGD (every push applied on arrival, no round
// waits), so the figure is the transport and the server's update, not the
// consistency protocol. Each worker times its own iterations after
// --warmup untimed ones and leaves the time in the store; worker 0 prints
// one line per mode (JSON with --json).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "braid/env.h"
#include "braid/error.h"
#include "braid/ps.h"
#include "braid/supervisor.h"
#include "ps_train.h"

namespace braid::tool {

namespace {

struct BenchFlags {
  int servers = 2, workers = 2, iters = 50, warmup = 5;
  std::string mode = "dense";
  int64_t bytes = 4 << 20, rows = 1 << 20, row_bytes = 64, keys = 4096;
  int64_t shm_bytes = int64_t(4) << 20;
  bool json = false;
};

// Seconds of the timed push_pulls; *shm_links: connections on shared memory.
double bench_worker(const BenchFlags& f, const Job& job, const ps::Layout& layout,
                    int64_t* shm_links) {
  ps::WorkerOptions wo;
  wo.rank = job.rank;
  wo.secret = job.secret;
  wo.shm_bytes = size_t(f.shm_bytes);
  ps::Worker worker(layout, wo, job.store);
  const bool dense = f.mode == "dense";
  const int64_t width = f.row_bytes / 4;
  const int64_t n = dense ? f.bytes / 4 : f.keys * width;
  std::vector<float> grad(static_cast<size_t>(n), 1e-6f), out(static_cast<size_t>(n));
  std::mt19937_64 rng(uint64_t(job.rank) * 7919 + 1);
  std::vector<int64_t> all(size_t(dense ? 0 : f.rows));
  for (size_t i = 0; i < all.size(); ++i) all[i] = int64_t(i);
  double t0 = 0;
  for (int it = 0; it < f.warmup + f.iters; ++it) {
    if (it == f.warmup) t0 = now_s();
    std::vector<int64_t> rows;
    if (!dense) {
      // A partial Fisher–Yates shuffle: `keys` distinct rows.
      for (int64_t i = 0; i < f.keys; ++i)
        std::swap(all[size_t(i)], all[size_t(i + int64_t(rng() % uint64_t(f.rows - i)))]);
      rows.assign(all.begin(), all.begin() + f.keys);
    }
    worker.push_pull({{0, rows, grad.data()}}, {{0, rows, out.data()}}, it);
  }
  const double secs = now_s() - t0;
  *shm_links = worker.worker_stats().shm_links;
  worker.finish();
  return secs;
}

int bench_rank(const BenchFlags& f, const Job& job) {
  ps::Layout layout(f.servers);
  std::vector<std::vector<float>> init(1);
  if (f.mode == "dense") {
    layout.add_dense("bench", f.bytes / 4);
    init[0].assign(size_t(f.bytes / 4), 0.0f);
  } else {
    layout.add_sparse("bench", f.rows, f.row_bytes / 4);
  }
  if (job.rank >= f.workers) {
    ps::ServerOptions o;
    o.rank = job.rank - f.workers;
    o.workers = f.workers;
    o.consistency = ps::Consistency::kAsp;
    o.lr.base = 1e-3f;
    o.secret = job.secret;
    ps::Server srv(layout, o, job.store, init);
    srv.wait_finished(std::chrono::hours(1));
    return 0;
  }
  int64_t shm_links = 0;
  const double secs = bench_worker(f, job, layout, &shm_links);
  const std::string me = "ps_bench/" + std::to_string(job.rank);
  const std::string s = std::to_string(secs);
  job.store->set(me, Bytes(s.begin(), s.end()));
  if (job.rank != 0) return 0;
  double sum = 0, worst = 0;
  for (int w = 0; w < f.workers; ++w) {
    const std::string key = "ps_bench/" + std::to_string(w);
    job.store->wait({key}, std::chrono::seconds(300));
    const Bytes b = job.store->get(key);
    const double t = std::stod(std::string(b.begin(), b.end()));
    sum += t;
    worst = std::max(worst, t);
  }
  nlohmann::json r{{"mode", f.mode}, {"servers", f.servers}, {"workers", f.workers},
                   {"shm_links", shm_links},  // worker 0's
                   {"iters", f.iters}, {"seconds_max", worst}};
  char line[256];
  if (f.mode == "dense") {
    const double per = sum / f.workers / f.iters;
    r.update({{"bytes", f.bytes}, {"time_us", per * 1e6}, {"algbw_gbs", double(f.bytes) / per / 1e9}});
    std::snprintf(line, sizeof line, "ps push_pull dense %lld B: %.1f us, %.3f GB/s per worker",
                  (long long)f.bytes, per * 1e6, double(f.bytes) / per / 1e9);
  } else {
    const double rate = double(f.workers) * double(f.keys) * f.iters / worst / f.servers;
    r.update({{"row_bytes", f.row_bytes}, {"keys", f.keys}, {"rows", f.rows},
              {"keys_per_s_per_server", rate}});
    std::snprintf(line, sizeof line,
                  "ps push_pull sparse %lld-byte rows, %lld keys per request: %.3g keys/s per server",
                  (long long)f.row_bytes, (long long)f.keys, rate);
  }
  std::printf("%s\n", f.json ? r.dump().c_str() : line);
  std::fflush(stdout);
  return 0;
}

}  // namespace

int ps_bench_main(int argc, char** argv) {
  CLI::App app{"braid ps bench: parameter-server push_pull throughput", "braid ps bench"};
  BenchFlags f;
  app.add_option("--servers", f.servers, "servers (2)")->check(CLI::PositiveNumber);
  app.add_option("--workers", f.workers, "workers (2)")->check(CLI::PositiveNumber);
  app.add_option("--mode", f.mode, "dense or sparse")->check(CLI::IsMember({"dense", "sparse"}));
  app.add_option("--bytes", f.bytes, "dense: bytes of the key (4 MiB)")->check(CLI::PositiveNumber);
  app.add_option("--rows", f.rows, "sparse: rows of the table (1M)")->check(CLI::PositiveNumber);
  app.add_option("--row-bytes", f.row_bytes, "sparse: bytes per row (64)")->check(CLI::PositiveNumber);
  app.add_option("--keys", f.keys, "sparse: rows per push_pull (4096)")->check(CLI::PositiveNumber);
  app.add_option("--iters", f.iters, "timed push_pulls per worker (50)")->check(CLI::PositiveNumber);
  app.add_option("--warmup", f.warmup, "untimed push_pulls first (5)")->check(CLI::NonNegativeNumber);
  app.add_option("--ps-shm-bytes", f.shm_bytes,
                 "bytes of each shared-memory ring (link.h); 0: TCP only (4194304)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--json", f.json, "one JSON object");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  BRAID_CHECK_ARG(f.bytes % 4 == 0 && f.row_bytes % 4 == 0,
                  "braid ps bench: --bytes and --row-bytes must be multiples of 4 (f32)");
  BRAID_CHECK_ARG(f.mode == "dense" || f.keys <= f.rows,
                  "braid ps bench: --keys " + std::to_string(f.keys) + " exceeds --rows " +
                      std::to_string(f.rows));
  return launch::run_forked("braid ps bench", f.workers + f.servers,
                            [&](const launch::ForkedRank& r) {
                              return bench_rank(f, {r.rank, r.size,
                                                    make_file_store(r.store_dir, r.size), r.secret});
                            });
}

}  // namespace braid::tool
