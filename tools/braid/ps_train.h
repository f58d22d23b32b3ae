// What `braid ps train`'s files share: the flags and the job a rank
// belongs to. The worker's loop and the model's keys are the library's
// (braid/ps_trainer.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "braid/ps.h"
#include "braid/ps_trainer.h"
#include "braid/store.h"
#include "train_setup.h"

namespace braid::tool {

struct PsFlags : TrainFlags {
  int servers = 1, workers = 1;
  std::string placement = "dedicated", consistency = "bsp", late = "drop", slow, rule;
  int staleness = 0, round_k = 0, replicas = 1;
  int spare_servers = 0;  // --spare-servers N (ps_spare.h)
  std::vector<std::string> kill_server;  // SERVER:STEP (ps_faults.h)
  std::string kill_worker;               // WORKER:STEP (ps_faults.h)
  std::string hold_worker;               // WORKER:STEP (ps_faults.h)
  double timeout_s = 300;
  int64_t shm_bytes = int64_t(4) << 20;  // --ps-shm-bytes (ps::WorkerOptions::shm_bytes)
  // Server checkpoints (braid/ps_checkpoint.h); --resume names a save dir
  // or one of its step directories.
  std::string save_dir;
  int64_t save_every = 0;
  // Hot keys: workers refresh their hot sets every hot_every steps.
  bool hot_keys = false;
  int64_t hot_every = 10;
  int hot_max_rows = 32;
};

struct Job {
  int rank = 0, size = 1;
  std::shared_ptr<Store> store;
  std::string secret;
};

// The job's ranks: W workers, then (dedicated) S servers and the spares.
inline int ps_world(const PsFlags& f) {
  return f.placement == "dedicated" ? f.workers + f.servers + f.spare_servers : f.workers;
}
// One rank of a `braid ps train` job (ps_rank.cc): a worker, a server,
// both, as the placement says, or a spare server (ps_spare.h).
int run_ps_rank(const Job& job, PsFlags f);
// Worker w's training (ps_cmd.cc: ps::WorkerTrainer), from round `start`;
// worker 0 logs.
int run_ps_worker(const Job& job, PsFlags f, int w, TrainSetup& setup, const ps::Layout& layout,
                  ps::ModelKeys& keys, int64_t start);
// --slow-worker RANK:FACTOR; {-1, 1} when empty. Throws kInvalidArgument.
std::pair<int, double> parse_slow(const std::string& s);

// braid ps bench (ps_bench.cc): argv[0] is "bench".
int ps_bench_main(int argc, char** argv);

}  // namespace braid::tool
