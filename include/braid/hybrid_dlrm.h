// parallel::HybridDlrmTrainer — a DLRM trained with its embedding tables
// model parallel and its MLPs data parallel, as TorchRec's
// DistributedModelParallel trains one: `braid train dlrm --dp N
// --embeddings sharded`.
//
// Each rank builds nn::Dlrm with parallel::ShardedTables
// (braid/sharded_embeddings.h) in place of its local tables, so its
// parameters are only the bottom and top MLPs; those are data parallel
// (parallel::DataParallel, ZeRO 0, buckets reduced as the MLPs' gradients
// become ready). The tables' lookups cross ranks through the exchange; their
// gradients stay sparse and are applied by the row-wise optimizer in the
// optimizer step. The step loop is nn::Trainer's with hooks that are
// DataParallel's plus the tables' (begin_step clears their row gradients,
// optimizer_step applies them after the MLPs' update); each rank trains its
// contiguous share of every global batch, so every step's loss is the
// single-process run's (nn::Dlrm + nn::DlrmRowwiseHooks) within rounding.
//
// Why a trainer of its own rather than a parallel::ModelSpec for
// parallelize: a ModelSpec's units are replicated or tensor-sharded
// modules whose parameters are dense and go through DataParallel or a
// pipeline; sharded tables have no dense gradient, their own optimizer, and
// a collective inside forward that all ranks of the data-parallel group
// join, none of which parallelize's (dp, tp, pp) mesh expresses. The
// tables take the world (every rank is in the one dp group).
//
// The tables use their own communicator (split off `comm` at construction,
// collective), so the exchange never queues behind the MLPs' reductions.
//
// Checkpoints are the serial layout of nn::DlrmRowwiseHooks (whole
// tables, their row state, MLPs and their optimizer state): saved at one
// world size or sharding, loaded at any other, or by one process.
//
// Errors (Error(kInvalidArgument), from the constructor, on every rank
// before any step): clipping (TrainOptions::clip > 0: not built with
// sparse tables), a plan for another world size, and what DataParallel and
// nn::Trainer refuse.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "braid/comm.h"
#include "braid/data_parallel.h"
#include "braid/dlrm.h"
#include "braid/embedding_plan.h"
#include "braid/row_optimizer.h"
#include "braid/sharded_embeddings.h"
#include "braid/trainer.h"

namespace braid::parallel {

class HybridDlrmTrainer {
 public:
  // Keeps references to data and opt (the MLPs' optimizer). Collective.
  HybridDlrmTrainer(std::shared_ptr<Communicator> comm, const nn::DlrmConfig& cfg, uint64_t seed,
                    EmbeddingPlan plan, nn::RowOptimizer table_opt, nn::Dataset& data,
                    nn::Optimizer& opt, nn::LrSchedule schedule, nn::TrainOptions opts,
                    DpOptions dp = {});
  ~HybridDlrmTrainer();

  // Collective. One step; StepStats are the global batch's.
  nn::StepStats step();
  int64_t next_step() const { return trainer_->next_step(); }
  void set_loss(nn::Loss& loss) { trainer_->set_loss(loss); }

  // Collective: mean loss and accuracy over all of `data`, each rank
  // evaluating a contiguous 1/world of it in batches of at most `batch`
  // (every rank the same number of batches, as the exchange needs).
  nn::EvalStats evaluate(const nn::Dataset& data, int64_t batch);

  // Collective. save: rank 0 writes the serial-layout checkpoint; load:
  // every rank reads `path` (any world size or sharding) and takes its
  // share; errors as nn::DlrmRowwiseHooks::load.
  void save(const std::string& path);
  void load(const std::string& path);

  ShardedTables& tables() { return *tables_; }
  DataParallel& dp() { return *dp_; }
  const std::vector<DpStepTimes>& rank_times() const { return dp_->rank_times(); }
  // Seconds of the last step in the tables' exchange (this rank).
  double exchange_s() const { return exchange_s_; }
  // Parameters of the MLPs (this rank holds all of them).
  int64_t mlp_parameters() const;

 private:
  class Hooks;
  // Announces the ids of the micro-batch after (step, micro) to the
  // tables (ShardedTables::prefetch).
  void prefetch(int64_t step, int micro);
  std::shared_ptr<Communicator> comm_, table_comm_;
  nn::Optimizer& opt_;
  nn::Dataset& data_;
  nn::DlrmConfig cfg_;
  int accum_ = 1;
  std::vector<int64_t> next_rows_;
  Tensor next_x_, next_y_, next_dense_;
  std::vector<Tensor> next_ids_;
  ShardedTables* tables_ = nullptr;  // owned by model_'s Dlrm
  std::unique_ptr<nn::Sequential> model_;
  std::unique_ptr<DataParallel> dp_;
  std::unique_ptr<nn::Trainer> trainer_;
  std::unique_ptr<Hooks> hooks_;
  double exchange_s_ = 0;
  std::vector<int64_t> train_batches_;  // every rank's micro-batch size
};

}  // namespace braid::parallel
