// nn::DlrmRowwiseHooks — one process training a DLRM (nn::Dlrm with its
// local tables) the way its sharded form trains (braid/sharded_embeddings.h):
// the tables by a row-wise optimizer on the rows each step touched
// (braid/row_optimizer.h), everything else by the run's optimizer. It is
// the single-process reference the sharded DLRM is tested against, and
// `braid train dlrm --table-optimizer sgd|adagrad` in one process.
//
// As nn::Trainer's hooks (set_hooks): begin_step zeroes the MLPs'
// gradients (never a table's: the tables' dense gradients are switched
// off, EmbeddingBag::set_dense_grad); after each micro-batch's backward the
// bags' sparse gradients (touched_rows / row_grads) are added up per
// table; optimizer_step runs the optimizer over the non-table parameters
// and the row-wise update over each table's touched rows. Gradient
// clipping is refused (Error(kNotSupported)): the norm would have to span
// the tables' sparse gradients.
//
// Checkpoints: the serial layout of nn::Trainer (model/<name> for every
// parameter, tables included, the optimizer's optim/<name>/<slot> for the
// MLPs) plus the row-wise state, optim/emb.<f>.weight/rowwise_sum (adagrad)
// — the layout the sharded trainer writes and reads at any world size.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "braid/dlrm.h"
#include "braid/row_optimizer.h"
#include "braid/trainer.h"

namespace braid {
struct Checkpoint;
}

namespace braid::nn {

class DlrmRowwiseHooks : public StepHooks {
 public:
  // `model`: a Dlrm with local tables, or make_dlrm's Sequential holding
  // one (else Error(kInvalidArgument)). Keeps a reference.
  DlrmRowwiseHooks(Module& model, RowOptimizer opt);

  // The parameters the run's optimizer updates: every one but the tables.
  const std::vector<Parameter*>& dense_parameters() const { return dense_; }
  const RowOptimizer& row_optimizer() const { return opt_; }
  // Bytes of the tables / of their row-wise optimizer state.
  int64_t table_bytes() const;
  int64_t state_bytes() const;

  void begin_step(int64_t step, const std::vector<Parameter*>& params) override;
  void after_backward(size_t unit) override;
  double clip_grad_norm(const std::vector<Parameter*>& params, double max_norm) override;
  void optimizer_step(Optimizer& opt, const std::vector<Parameter*>& params, float lr) override;

  // Whole checkpoints, as described above; load throws Error(kCorrupt)
  // naming a missing or misshapen tensor, and resume_step's errors.
  void save(const std::string& path, const Trainer& trainer, const Optimizer& opt) const;
  void load(const std::string& path, Trainer& trainer, Optimizer& opt);

 private:
  Dlrm* dlrm_ = nullptr;
  RowOptimizer opt_;
  std::vector<Parameter*> dense_;
  std::vector<RowGrads> grads_;          // per table, this step's
  std::vector<std::vector<float>> sum_;  // per table, adagrad's accumulators
};

}  // namespace braid::nn
