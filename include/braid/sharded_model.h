// parallel::ShardedModel — some or all of a ModelSpec's units built over a
// tensor-parallel group: a pipeline stage's units (or an interleaved
// schedule's chunks) on one rank, each parameter this rank's shard of the
// serial model's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "braid/layers.h"
#include "braid/model_spec.h"
#include "braid/moe.h"

namespace braid::parallel {

// Units [begin, end) of a ModelSpec.
struct UnitRange {
  size_t begin = 0, end = 0;
};

struct ShardedOptions {
  bool sequence_parallel = false;
  // The units this rank builds; empty: all of them. Units outside the
  // ranges are never allocated.
  std::vector<UnitRange> units;
  // false: leave each parameter as its layer's constructor made it, so
  // building costs only the units' own buffers. For a copy whose parameters
  // are then pointed at another's (a pipeline's activation slots) or whose
  // values do not matter (timing a unit).
  bool initialise = true;
  // Expert parallelism: the MoE layers' exchange over the ep group; their
  // expert tensors are this ep rank's block (ModelSpec::build_unit_ep).
  // Null: every expert here.
  std::shared_ptr<nn::ExpertExchange> experts;
};

// The spec's model over `tp`: a Sequential whose children are the units
// built here, in order (so nn::Trainer and DataParallel see them as the
// model's units, ZeRO-3's gathers included). Forward and backward over the
// whole model need every unit built here; a pipeline runs the units of its
// stages one by one (unit()). Parameters equal the serial model's for the spec's seed,
// sliced: the constructor builds the serial model once, keeps this rank's
// shards of the units it builds and frees it (memory: one full model,
// briefly; none with initialise false). Throws Error(kInvalidArgument)
// naming the size that does not split over the group (ModelSpec::
// check_split), or a unit range outside the model.
class ShardedModel : public nn::Sequential {
 public:
  ShardedModel(std::shared_ptr<const ModelSpec> spec, std::shared_ptr<Communicator> tp,
               ShardedOptions opts = {});
  ~ShardedModel() override;

  // The whole model: Error(kInvalidArgument) when only some units are
  // built here.
  const Tensor& forward(const Tensor& x, nn::Context& ctx) override;
  const Tensor& backward(const Tensor& dy, nn::Context& ctx) override;
  void collect_parameters(std::vector<nn::Parameter*>& out) override;

  // Unit i, or Error(kInvalidArgument) when it was not built here.
  nn::Module& unit(size_t i) const;
  bool has_unit(size_t i) const { return i < units_.size() && units_[i] != nullptr; }
  // Whether every unit is built here.
  bool whole() const;
  size_t unit_count() const { return units_.size(); }
  // Every parameter this rank holds with its split, in parameters() order.
  const std::vector<tp::Sharded>& shards() const { return shards_; }
  const std::shared_ptr<Communicator>& tp() const { return tp_; }
  const ModelSpec& spec() const { return *spec_; }
  const std::shared_ptr<const ModelSpec>& spec_ptr() const { return spec_; }

  // How many times this process has built a serial model to initialise a
  // ShardedModel (one per ShardedModel constructed with initialise true).
  static int64_t serial_builds();

 private:
  std::shared_ptr<const ModelSpec> spec_;
  std::shared_ptr<Communicator> tp_;
  ShardedOptions opts_;
  std::vector<nn::Module*> units_;  // [unit], owned as children; null: not built here
  std::vector<tp::Sharded> shards_;
};

}  // namespace braid::parallel
