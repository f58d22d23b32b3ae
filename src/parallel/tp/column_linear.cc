// Column-parallel linear: the output features are split, so each rank
// needs the whole input (copied in, or gathered along T under sequence
// parallelism) and computes its own block of the output with no further
// communication. The local product is nn::Linear itself.
#include "braid/error.h"
#include "braid/tp_layers.h"

namespace braid::parallel::tp {

namespace {
// This rank's output features: `parts` equal blocks (q|k|v), each split.
int64_t local_out(const std::string& name, int64_t out, int parts, int n) {
  const std::string what = "ColumnParallelLinear " + name + ": output features";
  if (parts == 1) return divide(out, n, what);
  BRAID_CHECK_ARG(parts > 1 && out % parts == 0,
                  what + " " + std::to_string(out) + " are not " + std::to_string(parts) +
                      " equal parts");
  return divide(out / parts, n, what + " per part") * parts;
}
}  // namespace

ColumnParallelLinear::ColumnParallelLinear(std::string name, int64_t in, int64_t out,
                                           std::shared_ptr<Communicator> tp, Options opts)
    : Module(name),
      local_(name, in, local_out(name, out, opts.parts, tp->size()),
             opts.bias),
      in_(in),
      out_(out),
      parts_(opts.parts) {
  if (opts.input == SeqMode::kSequenceParallel)
    enter_ = std::make_unique<GatherFromSequenceRegion>(name + ".gather_seq", tp);
  else
    enter_ = std::make_unique<CopyToTpRegion>(name + ".copy", tp);
  if (opts.gather_output) gather_ = std::make_unique<GatherFromTpRegion>(name + ".gather", tp);
}

const Tensor& ColumnParallelLinear::forward(const Tensor& x, nn::Context& ctx) {
  const Tensor& y = local_.forward(enter_->forward(x, ctx), ctx);
  return gather_ ? gather_->forward(y, ctx) : y;
}

const Tensor& ColumnParallelLinear::backward(const Tensor& dy, nn::Context& ctx) {
  const Tensor& d = local_.backward(gather_ ? gather_->backward(dy, ctx) : dy, ctx);
  if (!input_grad_) return d;
  return enter_->backward(d, ctx);
}

void ColumnParallelLinear::collect_parameters(std::vector<nn::Parameter*>& out) {
  local_.collect_parameters(out);
}

void ColumnParallelLinear::collect_shards(std::vector<Sharded>& out) {
  out.push_back({&local_.weight(), ShardSpec{0, parts_, false}, Shape{out_, in_}});
  if (local_.bias()) out.push_back({local_.bias(), ShardSpec{0, parts_, false}, Shape{out_}});
}

void ColumnParallelLinear::release_activations() {
  enter_->release_activations();
  local_.release_activations();
  if (gather_) gather_->release_activations();
}

void ColumnParallelLinear::set_input_grad(bool needed) {
  input_grad_ = needed;
  local_.set_input_grad(needed);
}

}  // namespace braid::parallel::tp
