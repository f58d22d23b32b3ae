// parallel::ShardedTables — a DLRM's embedding tables sharded over the
// ranks of a data-parallel job (model parallel), as TorchRec's
// EmbeddingBagCollection under DistributedModelParallel: the nn::DlrmTables
// of an nn::Dlrm whose MLPs are replicated (data parallel). Where each
// table lives is an EmbeddingPlan (braid/embedding_plan.h); the trainer
// that puts the two halves together is parallel::HybridDlrmTrainer
// (braid/hybrid_dlrm.h).
//
// Forward of a micro-batch (every rank, in step; b samples on this rank):
//   1. ids to the owners: one all_to_all_v sends each table shard's owner
//      this rank's ids of that table's feature, [b, bag];
//   2. each owner pools, for every sample of every rank, the ids that fall
//      in its rows, over its columns (sum, or mean with the weight of the
//      WHOLE bag: 1 / its real ids), into [b_s, cols];
//   3. pooled bags back: one all_to_all_v returns them to the batch owners,
//      which add the pieces into [b, dim] per feature (row-wise: partial
//      sums in rank order; column-wise: side by side; table-wise: whole).
// Backward: the batch owner sends each owner its dL/dpooled columns (one
// all_to_all_v, which also carries the next forward's ids when the trainer
// announced them: prefetch) and the owner scatters them into the rows its shard holds
// (only the touched rows: a sparse gradient, nn::RowGrads, gathered over
// the step's micro-batches). apply(lr), in the optimizer step, updates the
// touched rows with the row-wise optimizer (braid/row_optimizer.h);
// row-wise Adagrad on a column-wise table adds the row's square sums over
// every column shard with one all_reduce first, so each row's state is the
// full row's, as in one process. No table gradient is ever dense, reduced
// or replicated.
//
// Every sample's pooled bag and every row's update is what one process
// computes (nn::Dlrm with local tables and nn::DlrmRowwiseHooks), up to the
// order of floating-point additions: row-wise pieces are added in rank
// order. Initial values are the serial model's (nn::dlrm_table_init).
//
// The communicator should be the tables' own (HybridDlrmTrainer splits one
// off), since the data-parallel gradient reductions of the MLPs run on the
// job's communicator in the background while the exchange runs.
//
// Errors: an id outside its table raises Error(kInvalidArgument) naming
// the feature, on the rank that holds the sample (before it sends); the
// plan's errors come from plan_embeddings.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "braid/comm.h"
#include "braid/dlrm.h"
#include "braid/embedding_plan.h"
#include "braid/row_optimizer.h"

namespace braid {
struct Checkpoint;
}

namespace braid::parallel {

namespace embed {
class Exchange;
}

class ShardedTables : public nn::DlrmTables {
 public:
  // Collective only in use (construction sends nothing). Table parameter
  // names are the serial model's, "emb.<f>.weight".
  ShardedTables(std::shared_ptr<Communicator> comm, const nn::DlrmConfig& cfg, uint64_t seed,
                EmbeddingPlan plan, nn::RowOptimizer opt);
  ~ShardedTables() override;

  void forward(const std::vector<Tensor>& ids, std::vector<const Tensor*>& pooled,
               nn::Context& ctx) override;
  void backward(const std::vector<Tensor>& dpooled, nn::Context& ctx) override;
  void release_activations() override;

  // Every rank's sample count in the forwards to come (one per rank, the
  // same list on every rank), which spares the exchange asking for them
  // each time; empty (the default): asked each forward.
  void set_batches(std::vector<int64_t> per_rank) { batches_ = std::move(per_rank); }

  // The ids (per feature, i32 [b, bag]) this rank's NEXT training forward
  // will look up, given before a backward by every rank or by none: they
  // travel with that backward's gradients, and that forward sends no ids
  // (one all_to_all_v fewer; needs set_batches, the same sizes). That
  // forward checks its ids are these: Error(kInternal) if not. An
  // evaluation forward (ctx.training false) in between leaves them be.
  void prefetch(const std::vector<Tensor>& next_ids);

  // Forgets the step's row gradients (begin of a step).
  void begin_step();
  // Collective: the row-wise update of every touched row of this rank's
  // shards with learning rate lr.
  void apply(float lr);

  const EmbeddingPlan& plan() const { return plan_; }
  const nn::RowOptimizer& optimizer() const { return opt_; }
  // Bytes of table shards / of their row-wise optimizer state this rank
  // holds (what it allocated). A column-wise table's row state is whole on
  // each of its column shards (every rank needs each row's accumulator).
  int64_t table_bytes() const;
  int64_t state_bytes() const;
  // Seconds in the exchange's collectives since the last call.
  double take_exchange_seconds();
  // Rows touched by the last step on this rank's shards (all shards).
  int64_t touched_rows() const { return touched_; }

  // Collective. Adds every table ("model/emb.<f>.weight", [rows, dim]) and
  // its row state ("optim/emb.<f>.weight/rowwise_sum") to `ck` on rank 0,
  // in the serial layout; the other ranks send their shards there.
  void add_state(Checkpoint& ck);
  // Copies this rank's shards (and row state) out of a serial-layout
  // checkpoint written at any world size; Error(kCorrupt) naming a tensor
  // that is missing or of the wrong shape.
  void load_state(const Checkpoint& ck);

 private:
  struct Shard;
  void pool(int s, size_t k);

  std::shared_ptr<Communicator> comm_;
  nn::DlrmConfig cfg_;
  EmbeddingPlan plan_;
  nn::RowOptimizer opt_;
  std::unique_ptr<embed::Exchange> ex_;
  std::vector<Shard> shards_;  // this rank's, in Exchange::owned order
  std::vector<Tensor> out_;    // per feature, [b, dim]
  std::vector<int64_t> batches_;
  std::vector<Tensor> next_ids_;                  // to send with the next backward
  std::vector<std::vector<int32_t>> prefetched_;  // sent, for the next forward
  bool has_next_ = false, has_prefetched_ = false;
  int64_t touched_ = 0;
};

}  // namespace braid::parallel
