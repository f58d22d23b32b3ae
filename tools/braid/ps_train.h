// What `braid ps train` (ps_cmd.cc) shares with its sparse workload
// (ps_dlrm.cc): the flags, the job a rank belongs to, and the embedding
// tables kept as sparse keys.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "braid/dlrm.h"
#include "braid/ps.h"
#include "braid/store.h"
#include "braid/trainer.h"
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

// A Trainer that can gather any step's input ahead of running it (a
// parameter-server worker pulls the embedding rows the next batch names
// together with its push of this step's gradients).
class PsTrainer : public nn::Trainer {
 public:
  using nn::Trainer::Trainer;
  // This rank's input rows of step `step`, as step() will gather them.
  const Tensor& input_of(int64_t step) {
    sampler_.shard(step, ahead_);
    data_.gather(ahead_.data(), int64_t(ahead_.size()), ahead_x_, ahead_y_);
    return ahead_x_;
  }

 private:
  std::vector<int64_t> ahead_;
  Tensor ahead_x_, ahead_y_;
};

// The embedding tables of a DLRM model as sparse keys (rows by id); every
// other parameter stays a dense key. Key id = position in the model's
// parameter list. A worker pulls, before a step, only the rows its batch
// names and pushes, after backward, only the rows it touched
// (EmbeddingBag's sparse gradient; the tables' dense gradients are off).
// A model without tables (mlp) has none, and everything below is a no-op.
class SparseTables {
 public:
  // `params` is model's parameter list. Switches the tables' dense
  // gradients off.
  SparseTables(nn::Module& model, const std::vector<nn::Parameter*>& params);

  bool is_table(size_t key) const;
  // Every parameter as a key of `layout`, in order; `init` gets each
  // dense key's initial values (empty for a table).
  void add_keys(ps::Layout& layout, std::vector<std::vector<float>>& init) const;
  // A table row's initial value (the servers' init_sparse): the model's own.
  void init_row(ps::KeyId key, int64_t row, float* out) const;

  bool empty() const { return tables_.empty(); }
  // Worker: appends to `out` a pull of the rows batch input `x` names, into
  // buffers that stay valid until the next add_pull; store_pulled then
  // writes them into the tables (once: later calls do nothing until the
  // next add_pull).
  void add_pull(std::vector<ps::KeyData>& out, const Tensor& x);
  void store_pulled();
  // Worker: every row of every table (before evaluating the whole model).
  void pull_all(ps::Worker& worker, int64_t clock);
  // Worker: appends the touched rows' gradients times `scale` to `out`;
  // they stay valid until the next call.
  void add_push(std::vector<ps::KeyData>& out, float scale);

 private:
  struct Table {
    size_t key = 0;
    nn::EmbeddingBag* bag = nullptr;
    std::vector<int64_t> rows;  // scratch: rows of the pull in flight
    std::vector<float> buf;     // scratch: the pulled rows
    std::vector<float> grads;   // scratch: scaled gradients of the push in flight
  };
  std::vector<Table> tables_;
  std::vector<nn::Parameter*> params_;
  int64_t dense_ = 0, bag_ = 0;  // the input row's layout (dlrm.h)
  bool pending_ = false;         // rows pulled and not stored yet
  void add_rows_pull(std::vector<ps::KeyData>& out);
};

// The job's ranks: W workers, then (dedicated) S servers and the spares.
inline int ps_world(const PsFlags& f) {
  return f.placement == "dedicated" ? f.workers + f.servers + f.spare_servers : f.workers;
}
// One rank of a `braid ps train` job (ps_rank.cc): a worker, a server,
// both, as the placement says, or a spare server (ps_spare.h).
int run_ps_rank(const Job& job, PsFlags f);
// Worker w's training loop (ps_cmd.cc), from round `start`; rank 0 logs.
int run_ps_worker(const Job& job, PsFlags f, int w, TrainSetup& setup, const ps::Layout& layout,
                  SparseTables& sparse, int64_t start);
// --slow-worker RANK:FACTOR; {-1, 1} when empty. Throws kInvalidArgument.
std::pair<int, double> parse_slow(const std::string& s);

// braid ps bench (ps_bench.cc): argv[0] is "bench".
int ps_bench_main(int argc, char** argv);

}  // namespace braid::tool
