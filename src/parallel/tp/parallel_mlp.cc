// The MLP block split Megatron's way: fc by output features, proj by input
// features, so GELU runs on each rank's own hidden features and the only
// communication is the one in front of fc (its backward) and the one
// after proj (its forward).
#include "braid/error.h"
#include "braid/tp_layers.h"
#include "parallel/tp/blocks.h"

namespace braid::parallel::tp {

ParallelMlp::ParallelMlp(std::string name, int64_t dim, int64_t hidden,
                         std::shared_ptr<Communicator> tp, SeqMode mode, float dropout,
                         uint64_t dropout_key)
    : Module(name),
      tp_(tp),
      mode_(mode),
      fc_(name + ".fc", dim, hidden, tp, {true, 1, false, mode}),
      act_(name + ".gelu"),
      proj_(name + ".proj", hidden, dim, tp, {true, mode}),
      drop_(name + ".drop", dropout, dropout_key) {}

const Tensor& ParallelMlp::forward(const Tensor& x, nn::Context& ctx) {
  const Tensor& y = proj_.forward(act_.forward(fc_.forward(x, ctx), ctx), ctx);
  // Under sequence parallelism y holds positions [r·T/n, (r+1)·T/n) of
  // each sample: its first element is element r·(T/n)·C of the sample.
  drop_.set_element_offset(
      mode_ == SeqMode::kSequenceParallel ? int64_t(tp_->rank()) * per_sample(y) : 0);
  return drop_.forward(y, ctx);
}

const Tensor& ParallelMlp::backward(const Tensor& dy, nn::Context& ctx) {
  const Tensor& d1 = drop_.backward(dy, ctx);
  const Tensor& d2 = proj_.backward(d1, ctx);
  return fc_.backward(act_.backward(d2, ctx), ctx);
}

void ParallelMlp::collect_parameters(std::vector<nn::Parameter*>& out) {
  fc_.collect_parameters(out);
  proj_.collect_parameters(out);
}

void ParallelMlp::collect_shards(std::vector<Sharded>& out) {
  fc_.collect_shards(out);
  proj_.collect_shards(out);
}

void ParallelMlp::release_activations() {
  fc_.release_activations();
  act_.release_activations();
  proj_.release_activations();
  drop_.release_activations();
}

void ParallelMlp::set_input_grad(bool needed) {
  input_grad_ = needed;
  fc_.set_input_grad(needed);
}

}  // namespace braid::parallel::tp
