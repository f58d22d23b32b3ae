// nn::make_mlp's model as a ModelSpec: unit k is layer fc{k+1} with the
// ReLU after it. Under tensor parallelism the layers pair up as Megatron's
// MLP does — an odd layer column-parallel, the next row-parallel, so the
// hidden activation between them stays split and each pair costs one
// all_reduce forward and one backward; an unpaired last layer is
// replicated (every rank computes it whole, the same on each).
#include "braid/error.h"
#include "braid/model_spec.h"
#include "braid/tp_layers.h"

namespace braid::parallel {

namespace {

class MlpSpec : public ModelSpec {
 public:
  MlpSpec(std::vector<int64_t> sizes, uint64_t seed) : sizes_(std::move(sizes)), seed_(seed) {
    BRAID_CHECK_ARG(sizes_.size() >= 2, "an MLP needs at least input and output sizes");
    for (int64_t s : sizes_) BRAID_CHECK_ARG(s > 0, "MLP sizes must be positive");
  }

  std::string name() const override { return "mlp"; }
  uint64_t seed() const override { return seed_; }
  size_t unit_count() const override { return sizes_.size() - 1; }
  std::string describe_units() const override { return std::to_string(unit_count()) + " layers"; }
  std::vector<double> unit_costs() const override {
    std::vector<double> cost;
    for (size_t k = 0; k < unit_count(); ++k) cost.push_back(double(sizes_[k] * sizes_[k + 1]));
    return cost;
  }

  void check_split(int n, bool sequence_parallel) const override {
    BRAID_CHECK_ARG(!sequence_parallel || n == 1,
                    "mlp: sequence parallelism splits a sequence, and the MLP's samples have "
                    "none (gpt has one)");
    for (size_t k = 0; k + 1 < unit_count(); k += 2)
      tp::divide(sizes_[k + 1], n, "MLP hidden size of fc" + std::to_string(k + 1));
  }

  std::unique_ptr<nn::Module> build_unit(size_t k, const std::shared_ptr<Communicator>& tp, bool,
                                         std::vector<tp::Sharded>& shards) const override {
    const std::string name = "fc" + std::to_string(k + 1);
    auto unit = std::make_unique<nn::Sequential>(name);
    const int64_t in = sizes_[k], out = sizes_[k + 1];
    if (k % 2 == 1) {
      tp::RowParallelLinear::Options o;
      unit->emplace<tp::RowParallelLinear>(name, in, out, tp, o).collect_shards(shards);
    } else if (k + 1 < unit_count()) {
      tp::ColumnParallelLinear::Options o;
      unit->emplace<tp::ColumnParallelLinear>(name, in, out, tp, o).collect_shards(shards);
    } else {
      auto& lin = unit->emplace<nn::Linear>(name, in, out);
      for (nn::Parameter* p : lin.parameters())
        shards.push_back({p, tp::ShardSpec{}, p->data.shape()});
    }
    if (k + 1 < unit_count()) unit->emplace<nn::ReLU>("relu" + std::to_string(k + 1));
    if (k == 0) unit->set_input_grad(false);  // as make_mlp: the input needs no gradient
    return unit;
  }

  std::unique_ptr<nn::Sequential> build_serial() const override {
    return nn::make_mlp(sizes_, seed_);
  }
  std::unique_ptr<nn::Loss> make_loss(const std::shared_ptr<Communicator>&) const override {
    return std::make_unique<nn::SoftmaxCrossEntropy>();
  }
  Tensor sample_input(int64_t rows) const override { return Tensor({rows, sizes_.front()}); }
  Tensor sample_target(int64_t rows) const override { return Tensor({rows}, DType::kI32); }

 private:
  std::vector<int64_t> sizes_;
  uint64_t seed_;
};

}  // namespace

std::unique_ptr<ModelSpec> mlp_spec(const std::vector<int64_t>& sizes, uint64_t seed) {
  return std::make_unique<MlpSpec>(sizes, seed);
}

}  // namespace braid::parallel
