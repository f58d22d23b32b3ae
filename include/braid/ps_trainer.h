// ps::WorkerTrainer: a parameter-server worker's training loop, what
// `braid ps train` runs on each worker. Built on nn::Trainer (the forward
// and backward of this worker's share of each global batch) with no local
// optimizer: the servers run it (ps_server.h, UpdateRule).
//
// A step at clock c: forward/backward the worker's shard of global batch c
// with the parameters pulled for c, then ONE exchange with the servers
// (Worker::step, one frame per server): the step's loss sums as a report,
// the gradients pushed (scaled by W: the trainer gives each worker its
// share of the global mean, the servers average) with the clock flag, and
// the pull for clock c + 1 of every dense key and the table rows batch
// c + 1 names. The servers decide how long that pull waits (Consistency);
// under k-of-n it answers with the open round, which becomes the next
// clock, and a straggler pulls that batch's rows again. With chains
// (replicas ≥ 2) the push is its own request before the exchange.
//
// Before the first step every worker pulls for its start clock and waits
// in the store (keys "ps/started/<w>") until all have: otherwise under
// k-of-n the first workers up could close every round before a late
// starter's first pull. So every worker takes step `start`.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "braid/ps_keys.h"
#include "braid/ps_server.h"
#include "braid/ps_worker.h"
#include "braid/store.h"
#include "braid/trainer.h"

namespace braid::nn {
class EmbeddingBag;
}  // namespace braid::nn

namespace braid::ps {

// A model's parameters as keys of a Layout: key id = position in the
// parameter list; a DLRM's embedding tables (nn::Dlrm) are sparse keys,
// rows by id, every other parameter a dense key. A worker pulls, before a
// step, only the rows its batch names and pushes, after backward, only the
// rows it touched (EmbeddingBag's sparse gradient; the tables' dense
// gradients are switched off). A model without tables has none, and the
// table calls below do nothing.
class ModelKeys {
 public:
  // `params`: the model's parameter list (the trainer's).
  ModelKeys(nn::Module& model, const std::vector<nn::Parameter*>& params);

  bool is_table(size_t key) const;
  bool has_tables() const { return !tables_.empty(); }
  // Every parameter as a key of `layout`, in order; `init` gets each dense
  // key's initial values (empty for a table): the servers' init.
  void add_keys(Layout& layout, std::vector<std::vector<float>>& init) const;
  // A table row's initial value (the servers' init_sparse): the model's own.
  void init_row(KeyId key, int64_t row, float* out) const;

  // Every dense key's values (grads = false) or gradients, as KeyData.
  std::vector<KeyData> dense(bool grads) const;
  // Appends to `out` a pull of the rows batch input `x` names, into buffers
  // that stay valid until the next add_pull; store_pulled then writes them
  // into the tables (once: later calls do nothing until the next add_pull).
  void add_pull(std::vector<KeyData>& out, const Tensor& x);
  void store_pulled();
  // Every row of every table, pulled at `clock` and stored.
  void pull_all(Worker& worker, int64_t clock);
  // Appends the touched rows' gradients times `scale` to `out`; they stay
  // valid until the next call.
  void add_push(std::vector<KeyData>& out, float scale);

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
  void add_rows_pull(std::vector<KeyData>& out);
};

struct TrainerOptions {
  int worker = 0, workers = 1;                  // this worker's id, W
  int64_t start = 0;                            // the first clock (a resumed job's round)
  int64_t steps = 0;                            // trains clocks [start, steps)
  Consistency consistency = Consistency::kBsp;  // as the servers'
  int replicas = 1;                             // as the servers'
  // Hot keys (ServerOptions::hot_keys): refresh_hot every hot_every steps,
  // right after the pull, then pull that step's rows again.
  bool hot_keys = false;
  int64_t hot_every = 10;
  // A straggler, for tests: the compute takes `slow` times as long, the
  // extra time asleep before the push (its gradient arrives late).
  double slow = 1;
  // Ask every server's counters with each exchange (StepReport::servers).
  bool stats = false;
  std::chrono::milliseconds timeout{std::chrono::seconds(120)};  // the start wait
};

// One step, as the hooks see it after its exchange.
struct StepReport {
  int64_t clock = 0, next = 0;  // the step's clock, and the next one
  nn::StepStats stats;          // this worker's (loss: its own share)
  double compute_s = 0;         // forward and backward (a slow worker's sleep included)
  double exchange_t0 = 0;       // now_s() when the exchange began
  // With TrainerOptions::stats: server 0's counters right after this step's
  // pull, and every server's read with the next pull (report_* are the
  // step's reports summed: the global batch's loss under BSP).
  ServerStats at_pull;
  const std::vector<ServerStats>* servers = nullptr;
};

// Calls around each step's exchange (fault injection, logging). Defaults
// do nothing.
class TrainerHooks {
 public:
  virtual ~TrainerHooks() = default;
  virtual void started() {}  // every worker has pulled for its start clock
  virtual void pulled(int64_t clock) { (void)clock; }           // each step's pull answered
  virtual void before_exchange(int64_t clock) { (void)clock; }  // not timed
  virtual void before_push(int64_t clock) { (void)clock; }      // timed in the exchange
  virtual void after_push(int64_t clock) { (void)clock; }
  virtual void after_step(StepReport& r) { (void)r; }
};

class WorkerTrainer : public nn::Trainer {
 public:
  // As nn::Trainer's (opts.rank / opts.world: this worker and W), plus the
  // worker's connections and the model's keys; all must outlive it.
  WorkerTrainer(Worker& worker, std::shared_ptr<Store> store, ModelKeys& keys, nn::Module& model,
                nn::Dataset& data, nn::Optimizer& opt, nn::LrSchedule schedule,
                nn::TrainOptions opts, TrainerOptions po);
  ~WorkerTrainer() override;

  // Trains clocks [start, steps) (hooks: optional, not owned); returns the
  // steps this worker took (fewer under k-of-n when it straggled). Throws
  // what Worker's calls and the layers throw.
  int64_t train(TrainerHooks* hooks = nullptr);
  // The parameters once every worker's last push is applied: every dense
  // key and table row pulled at `clock` (ASP and k-of-n apply a straggler's
  // after this worker's last step; SSP: `steps + s`).
  void pull_final(int64_t clock);

 private:
  struct Loop;
  std::unique_ptr<Loop> loop_;
  // This worker's input rows of step `step`, as step() will gather them.
  const Tensor& input_of(int64_t step);
};

}  // namespace braid::ps
