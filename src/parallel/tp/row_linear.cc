// Row-parallel linear: the input features are split, so each rank's
// product is a partial sum of the output; the partial sums are added over
// the group (all_reduce, or reduce_scatter along T under sequence
// parallelism) and the bias is added once, after the sum, exactly as the
// serial layer adds it once.
#include "../../tensor/simd.h"  // first: sets vectorisation options
#include "braid/error.h"
#include "braid/kernels.h"
#include "braid/tp_layers.h"

namespace braid::parallel::tp {

RowParallelLinear::RowParallelLinear(std::string name, int64_t in, int64_t out,
                                     std::shared_ptr<Communicator> tp, Options opts)
    : Module(name),
      local_(name, divide(in, tp->size(), "RowParallelLinear " + name + ": input features"), out,
             false),
      in_(in),
      out_(out),
      has_bias_(opts.bias),
      mode_(opts.output),
      b_(name + ".bias", {opts.bias ? out : 0}, false) {
  if (mode_ == SeqMode::kSequenceParallel)
    leave_ = std::make_unique<ReduceScatterToSequenceRegion>(name + ".reduce_scatter_seq", tp);
  else
    leave_ = std::make_unique<ReduceFromTpRegion>(name + ".reduce", tp);
}

namespace {
BRAID_SIMD_FN void add_rows(const float* x, const float* b, float* y, int64_t rows,
                            int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = x[r * cols + c] + b[c];
}
}  // namespace

const Tensor& RowParallelLinear::forward(const Tensor& x, nn::Context& ctx) {
  const Tensor& summed = leave_->forward(local_.forward(x, ctx), ctx);
  if (!has_bias_) return summed;
  y_.resize(summed.shape(), DType::kF32);
  add_rows(summed.f32(), b_.data.f32(), y_.f32(), summed.numel() / out_, out_);
  return y_;
}

const Tensor& RowParallelLinear::backward(const Tensor& dy, nn::Context& ctx) {
  if (has_bias_) {
    col_sum_acc(dy.f32(), dy.numel() / out_, out_, b_.grad.f32());
    ctx.param_ready(b_);
  }
  return local_.backward(leave_->backward(dy, ctx), ctx);
}

void RowParallelLinear::collect_parameters(std::vector<nn::Parameter*>& out) {
  local_.collect_parameters(out);
  if (has_bias_) out.push_back(&b_);
}

void RowParallelLinear::collect_shards(std::vector<Sharded>& out) {
  out.push_back({&local_.weight(), ShardSpec{1, 1, false}, Shape{out_, in_}});
  if (has_bias_)
    out.push_back({&b_, ShardSpec{-1, 1, mode_ == SeqMode::kSequenceParallel}, Shape{out_}});
}

void RowParallelLinear::release_activations() {
  local_.release_activations();
  leave_->release_activations();
  y_.release();
}

}  // namespace braid::parallel::tp
