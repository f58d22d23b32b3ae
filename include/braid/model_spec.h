// parallel::ModelSpec — what a model tells parallelize() (parallelize.h)
// about itself, so that one function can lay any model out over a
// dp × tp × pp mesh:
//   * its top-level units in forward order: what pipeline stages are cut
//     from, each with a relative cost to cut by;
//   * each unit built alone over a tensor-parallel group, every parameter
//     with its split over that group (tp::ShardSpec: replicated, or split
//     along a dimension), under the serial model's parameter names;
//   * the serial model, whose parameters initialise the shards (so every
//     layout starts from the one-process model's values);
//   * the loss on the last unit's output over the tp group.
// gpt_spec, mlp_spec and dlrm_spec describe braid's three models. A new
// model (an MoE GPT, a DLRM with sharded tables) is one more spec, not one
// more trainer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "braid/comm.h"
#include "braid/dlrm.h"
#include "braid/loss.h"
#include "braid/models.h"
#include "braid/moe.h"
#include "braid/module.h"
#include "braid/tp_shard.h"

namespace braid::parallel {

class ModelSpec {
 public:
  virtual ~ModelSpec() = default;

  virtual std::string name() const = 0;  // "gpt", "mlp", "dlrm"
  virtual uint64_t seed() const = 0;

  virtual size_t unit_count() const = 0;
  // The units for messages, e.g. "the embedding, 4 blocks, the final norm
  // and the head".
  virtual std::string describe_units() const = 0;
  // unit_count() relative costs of forward plus backward (multiply-adds per
  // sample; what stages are cut by when nothing was measured).
  virtual std::vector<double> unit_costs() const = 0;

  // Throws Error(kInvalidArgument) naming the size that does not split over
  // `tp` ranks (or naming what cannot be split at all).
  virtual void check_split(int tp, bool sequence_parallel) const = 0;
  // Unit i over `tp` (size 1: the serial layers), each of its parameters
  // appended to `shards` with its split, in parameters() order; values left
  // as the layers' constructors make them.
  virtual std::unique_ptr<nn::Module> build_unit(size_t i, const std::shared_ptr<Communicator>& tp,
                                                 bool sequence_parallel,
                                                 std::vector<tp::Sharded>& shards) const = 0;
  // Models with experts (an MoE GPT, moe.h): unit i with its MoE layers'
  // experts split over the expert-parallel group behind `ep` (null: all
  // here), each expert tensor appended to `shards` with expert = true and
  // its full (serial) shape. The default builds build_unit(i, …): a model
  // without experts ignores `ep`.
  virtual std::unique_ptr<nn::Module> build_unit_ep(size_t i, const std::shared_ptr<Communicator>& tp,
                                                    const std::shared_ptr<nn::ExpertExchange>& ep,
                                                    bool sequence_parallel,
                                                    std::vector<tp::Sharded>& shards) const {
    (void)ep;
    return build_unit(i, tp, sequence_parallel, shards);
  }
  // Experts per MoE layer (0: the model has none).
  virtual int64_t experts() const { return 0; }
  // The one-process model, parameters initialised from seed().
  virtual std::unique_ptr<nn::Sequential> build_serial() const = 0;
  // The loss on the last unit's output over `tp` (its block of the output,
  // or all of it).
  virtual std::unique_ptr<nn::Loss> make_loss(const std::shared_ptr<Communicator>& tp) const = 0;
  // A batch of `rows` samples of the model's input and targets, for timing
  // units (measure_unit_costs); the values do not matter.
  virtual Tensor sample_input(int64_t rows) const = 0;
  virtual Tensor sample_target(int64_t rows) const = 0;
  // Throws Error(kInvalidArgument) when an input cannot run over `tp`
  // ranks (a sequence that does not split under sequence parallelism).
  virtual void check_input(const Tensor& x, int tp, bool sequence_parallel) const {
    (void)x, (void)tp, (void)sequence_parallel;
  }
};

// nn::make_gpt's model. Units: 0 the embedding, 1 … L the blocks, L + 1
// ln_f, L + 2 lm_head. Under tp: attention heads and the MLP's hidden
// features split (Megatron's column/row pairs), the embedding and the head
// split by vocabulary, the loss vocabulary-parallel. With cfg.moe.experts >
// 0 the blocks moe_block() picks are MoE blocks (tp::TpMoeBlock: attention
// split over tp, the MoE replicated over tp): under expert parallelism their
// experts split over ep (build_unit_ep). Sequence parallelism with MoE is
// refused by check_split.
std::unique_ptr<ModelSpec> gpt_spec(const nn::GptConfig& cfg, uint64_t seed);

// nn::make_mlp's model over `sizes`. Unit k is layer fc{k+1} with the ReLU
// after it. Under tp the layers pair up as Megatron's MLP does: fc1
// column-parallel (its output features split), fc2 row-parallel (its input
// features split, the partial products summed), fc3 column, fc4 row, …; an
// unpaired last layer is replicated. The loss is softmax cross-entropy on
// the whole logits.
std::unique_ptr<ModelSpec> mlp_spec(const std::vector<int64_t>& sizes, uint64_t seed);

// nn::make_dlrm's model, one unit (its tables and MLPs meet in the
// interaction): data parallel only; tp > 1 is refused by name. The loss is
// binary cross-entropy with logits.
std::unique_ptr<ModelSpec> dlrm_spec(const nn::DlrmConfig& cfg, uint64_t seed);

}  // namespace braid::parallel
