// nn::make_dlrm's model as a ModelSpec: one unit, since its tables and
// both MLPs meet in the interaction; nothing of it is split, so it trains
// data parallel. Its tables sharded over the ranks are a trainer of their
// own, parallel::HybridDlrmTrainer (braid/hybrid_dlrm.h says why).
#include "braid/error.h"
#include "braid/model_spec.h"

namespace braid::parallel {

namespace {

class DlrmSpec : public ModelSpec {
 public:
  DlrmSpec(const nn::DlrmConfig& cfg, uint64_t seed) : c_(cfg), seed_(seed) {}
  std::string name() const override { return "dlrm"; }
  uint64_t seed() const override { return seed_; }
  size_t unit_count() const override { return 1; }
  std::string describe_units() const override {
    return "one unit (its tables and MLPs meet in the interaction)";
  }
  std::vector<double> unit_costs() const override { return {1.0}; }
  void check_split(int n, bool) const override {
    BRAID_CHECK_ARG(n == 1, "dlrm: tensor parallelism over " + std::to_string(n) +
                                " ranks is not built for the DLRM; it trains data parallel "
                                "(--dp) or on parameter servers (braid ps train dlrm)");
  }
  std::unique_ptr<nn::Module> build_unit(size_t, const std::shared_ptr<Communicator>&, bool,
                                         std::vector<tp::Sharded>& shards) const override {
    auto m = nn::make_dlrm(c_, seed_);
    for (nn::Parameter* p : m->parameters())
      shards.push_back({p, tp::ShardSpec{}, p->data.shape()});
    return m;
  }
  std::unique_ptr<nn::Sequential> build_serial() const override { return nn::make_dlrm(c_, seed_); }
  std::unique_ptr<nn::Loss> make_loss(const std::shared_ptr<Communicator>&) const override {
    return std::make_unique<nn::BinaryCrossEntropyWithLogits>();
  }
  Tensor sample_input(int64_t rows) const override {
    return Tensor({rows, c_.input_width()});  // every id 0: the first row of each table
  }
  Tensor sample_target(int64_t rows) const override { return Tensor({rows}, DType::kI32); }

 private:
  nn::DlrmConfig c_;
  uint64_t seed_;
};

}  // namespace

std::unique_ptr<ModelSpec> dlrm_spec(const nn::DlrmConfig& cfg, uint64_t seed) {
  return std::make_unique<DlrmSpec>(cfg, seed);
}

}  // namespace braid::parallel
