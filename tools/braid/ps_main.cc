// braid ps: the command line (`braid ps train`, `braid ps bench`): flags,
// their checks, and how the job's ranks are started (ps_cmd.cc runs one).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "braid/error.h"
#include "braid/job.h"
#include "braid/ps.h"
#include "braid/supervisor.h"
#include "ps_faults.h"
#include "ps_train.h"
#include "subcommands.h"
#include "train_setup.h"

namespace braid::tool {

namespace {

void check_flags(const PsFlags& f) {
  BRAID_CHECK_ARG(f.workers >= 1 && f.servers >= 1, "braid ps: --workers and --servers must be >= 1");
  BRAID_CHECK_ARG(f.placement == "dedicated" || f.servers <= f.workers,
                  "braid ps: --placement colocated hosts at most one server per worker (--servers " +
                      std::to_string(f.servers) + " > --workers " + std::to_string(f.workers) + ")");
  const auto mode = ps::parse_consistency(f.consistency);
  BRAID_CHECK_ARG(mode != ps::Consistency::kRoundK || (f.round_k >= 1 && f.round_k <= f.workers),
                  "braid ps: --consistency kofn needs --round-k K with 1 <= K <= --workers");
  BRAID_CHECK_ARG(f.clip == 0, "braid ps: --clip needs the global gradient norm, which the "
                               "servers do not compute; not supported");
  BRAID_CHECK_ARG(f.checkpoint_every == 0,
                  "braid ps: --checkpoint writes the final weights only; the servers' state is "
                  "saved with --save-dir DIR --save-every N");
  BRAID_CHECK_ARG(f.save_every >= 0, "braid ps: --save-every must be >= 0");
  BRAID_CHECK_ARG(f.save_every == 0 || !f.save_dir.empty(), "braid ps: --save-every needs --save-dir");
  BRAID_CHECK_ARG(f.init_from.empty() || f.resume.empty(),
                  "braid ps: --init-from and --resume exclude each other");
  if (f.hot_keys) {
    BRAID_CHECK_ARG(f.model == "dlrm", "braid ps: --hot-keys needs sparse rows (dlrm)");
    BRAID_CHECK_ARG(mode == ps::Consistency::kBsp || mode == ps::Consistency::kSsp,
                    "braid ps: --hot-keys needs --consistency bsp or ssp");
    BRAID_CHECK_ARG(f.replicas == 1, "braid ps: --hot-keys needs --replicas 1");
    BRAID_CHECK_ARG(f.hot_every >= 1 && f.hot_max_rows >= 1,
                    "braid ps: --hot-every and --hot-max-rows must be >= 1");
  }
  BRAID_CHECK_ARG(f.model != "dlrm" || f.accum == 1,
                  "braid ps train dlrm: --accum must be 1 (a micro-batch's rows are pulled "
                  "before its forward and its touched rows pushed after its backward)");
  parse_slow(f.slow);
  parse_kill_server(f);
  parse_kill_worker(f);
  parse_hold_worker(f);
  BRAID_CHECK_ARG(f.replicas >= 1 && f.replicas <= f.servers,
                  "braid ps: --replicas " + std::to_string(f.replicas) +
                      " needs 1 <= R <= --servers (" + std::to_string(f.servers) + ")");
  BRAID_CHECK_ARG(f.spare_servers >= 0, "braid ps: --spare-servers must be >= 0");
  if (f.spare_servers > 0) {
    BRAID_CHECK_ARG(f.replicas >= 2, "braid ps: --spare-servers needs --replicas >= 2 (a spare "
                                     "copies a dead server's shards from the rest of its chains)");
    BRAID_CHECK_ARG(f.placement == "dedicated",
                    "braid ps: --spare-servers needs --placement dedicated");
  }
}

}  // namespace

int ps_main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "bench") == 0) return ps_bench_main(argc - 1, argv + 1);
  if (argc < 2 || std::strcmp(argv[1], "train") != 0) {
    std::fprintf(stderr, "usage: braid ps bench [options] | braid ps train mlp|dlrm --servers S --workers W --consistency "
                         "bsp|asp|ssp|kofn [options]\n");
    return 2;
  }
  if (argc >= 3 && argv[2][0] != '-' && std::strcmp(argv[2], "mlp") != 0 &&
      std::strcmp(argv[2], "dlrm") != 0)
    throw Error(Errc::kInvalidArgument, std::string("braid ps train: model '") + argv[2] +
                                            "' is not available; mlp and dlrm are");
  CLI::App app{"braid ps train: train a model through parameter servers", "braid ps train"};
  PsFlags f;
  add_train_options(app, f, true);
  app.add_option("--servers", f.servers, "parameter servers (1)")->check(CLI::PositiveNumber);
  app.add_option("--workers", f.workers, "workers (1)")->check(CLI::PositiveNumber);
  app.add_option("--placement", f.placement,
                 "dedicated (servers are ranks of their own) or colocated (workers 0..S-1 "
                 "each run a server)")
      ->check(CLI::IsMember({"dedicated", "colocated"}));
  app.add_option("--consistency", f.consistency, "bsp, asp, ssp or kofn")
      ->check(CLI::IsMember({"bsp", "asp", "ssp", "kofn"}));
  app.add_option("--staleness", f.staleness, "ssp: clocks a worker may run ahead (0)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--round-k", f.round_k, "kofn: pushes that close a round");
  app.add_option("--late", f.late, "kofn: late pushes are dropped or folded into the next round")
      ->check(CLI::IsMember({"drop", "fold"}));
  app.add_option("--slow-worker", f.slow, "RANK:FACTOR: worker RANK takes FACTOR times as long");
  app.add_option("--server-rule", f.rule, "server update rule: sgd, adagrad, adam, adamw "
                                          "(default: --optimizer)")
      ->check(CLI::IsMember({"sgd", "adagrad", "adam", "adamw"}));
  app.add_option("--replicas", f.replicas,
                 "servers keeping each shard, as a chain: writes at the head, reads at the "
                 "tail, fail-over when one dies (1)");
  app.get_option("--resume")->description(
      "resume from the servers' checkpoint: a --save-dir or one of its step-N directories");
  app.add_option("--save-dir", f.save_dir,
                 "each server saves its shard (parameters, optimizer state, rounds) under "
                 "DIR/step-N/ at the end (and every --save-every steps)");
  app.add_option("--save-every", f.save_every, "with --save-dir: also every N steps");
  app.add_flag("--hot-keys", f.hot_keys,
               "dlrm, bsp/ssp: servers replicate their most-pulled rows to the other "
               "servers, workers read them there");
  app.add_option("--hot-every", f.hot_every, "--hot-keys: workers refresh hot sets every N steps (10)");
  app.add_option("--hot-max-rows", f.hot_max_rows, "--hot-keys: the most rows a server makes hot (32)");
  app.add_option("--kill-server", f.kill_server,
                 "fault injection (tests, bench/ps_failover.sh): SERVER:STEP kills server "
                 "SERVER (0-based) just before worker 0 pushes step STEP; repeatable; with "
                 "--replicas >= 2 the job goes on");
  app.add_option("--kill-worker", f.kill_worker,
                 "fault injection (tests): WORKER:STEP SIGKILLs worker WORKER (0-based) just "
                 "before it pushes step STEP; the job fails, naming it");
  app.add_option("--hold-worker", f.hold_worker,
                 "fault injection (tests), ssp: WORKER:STEP holds worker WORKER's push of step "
                 "STEP until every other worker has clocked STEP + staleness");
  app.add_option("--spare-servers", f.spare_servers,
                 "with --replicas >= 2: N extra server ranks that stand by; when a server "
                 "dies, a spare joins every chain it was in by state transfer, so each chain "
                 "is back to R members (0)");
  app.add_option("--ps-shm-bytes", f.shm_bytes,
                 "bytes of each direction's shared-memory ring on a worker's connection to a "
                 "server on its host; 0: every connection over TCP (4194304)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--ps-timeout", f.timeout_s, "seconds any parameter-server wait may take (300)")
      ->check(CLI::PositiveNumber);
  try {
    app.parse(argc - 1, argv + 1);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (hybrid_requested(argc, argv))  // braid train's (train_hybrid.cc): the servers keep the tables
    throw Error(Errc::kInvalidArgument,
                "--embeddings, --shard, --table-optimizer and --table-memory-limit are braid "
                "train dlrm's; braid ps train keeps the tables on the servers (--server-rule picks "
                "their update)");
  check_flags(f);
  const int world = ps_world(f);
  if (job_world_from_env() > 1) {
    JobEnv env = bootstrap_from_env(std::chrono::milliseconds(int64_t(f.timeout_s * 1000)));
    return run_ps_rank({env.rank, env.size, env.store, env.secret}, f);
  }
  return launch::run_forked("braid ps", world, [&](const launch::ForkedRank& r) {
    return run_ps_rank({r.rank, r.size, make_file_store(r.store_dir, r.size), r.secret}, f);
  });
}

}  // namespace braid::tool
