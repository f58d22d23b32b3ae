// Attention with its heads split across the group: heads are independent,
// so each rank runs the serial attention core on its own heads' q, k, v
// (the column-parallel qkv's block) and the output projection, split by
// input features, sums the heads' contributions over the group.
#include "braid/error.h"
#include "braid/precision.h"
#include "braid/tp_layers.h"
#include "nn/attention_core.h"
#include "parallel/tp/blocks.h"

namespace braid::parallel::tp {

ParallelAttention::ParallelAttention(std::string name, int64_t dim, int64_t heads,
                                     std::shared_ptr<Communicator> tp, SeqMode mode,
                                     float dropout, uint64_t dropout_key)
    : Module(name),
      tp_(tp),
      mode_(mode),
      dim_(dim),
      heads_(heads),
      local_dim_(0),
      local_heads_(divide(heads, tp->size(), "attention " + name + ": heads")),
      qkv_(name + ".qkv", dim, 3 * dim, tp, {true, 3, false, mode}),
      proj_(name + ".proj", dim, dim, tp, {true, mode}),
      drop_(name + ".drop", dropout, dropout_key) {
  BRAID_CHECK_ARG(dim % heads == 0, "attention " + name + ": d_model " + std::to_string(dim) +
                                        " not divisible by heads " + std::to_string(heads));
  local_dim_ = dim / heads * local_heads_;
}

const Tensor& ParallelAttention::forward(const Tensor& x, nn::Context& ctx) {
  if (x.ndim() != 3 || x.dim(2) != dim_)
    throw Error(Errc::kInvalidArgument, "attention " + name_ + ": input " + shape_str(x.shape()) +
                                            " vs expected [B, T, " + std::to_string(dim_) + "]");
  const Tensor& qkv = qkv_.forward(x, ctx);  // [B, T, 3·C/n], T whole
  const int64_t B = qkv.dim(0), T = qkv.dim(1);
  qkv_out_ = &qkv;
  att_.resize({B, local_heads_, T, T}, activation_dtype());  // as the serial attention
  o_.resize({B, T, local_dim_}, DType::kF32);
  // This rank's heads start at global head rank · local_heads: the
  // probabilities' dropout draws the serial attention's mask for them.
  nn::causal_attention_forward(
      qkv, B, T, local_dim_, local_heads_, att_, o_,
      nn::attention_dropout(ctx, drop_, int64_t(tp_->rank()) * local_heads_));
  const Tensor& y = proj_.forward(o_, ctx);
  drop_.set_element_offset(
      mode_ == SeqMode::kSequenceParallel ? int64_t(tp_->rank()) * per_sample(y) : 0);
  return drop_.forward(y, ctx);
}

const Tensor& ParallelAttention::backward(const Tensor& dy, nn::Context& ctx) {
  BRAID_CHECK_ARG(qkv_out_ != nullptr, "attention " + name_ + ": backward before forward");
  const Tensor& dout = proj_.backward(drop_.backward(dy, ctx), ctx);  // [B, T, C/n]
  const int64_t B = o_.dim(0), T = o_.dim(1);
  dqkv_.resize({B, T, 3 * local_dim_}, activation_dtype());
  datt_.resize({B, local_heads_, T, T}, activation_dtype());
  nn::causal_attention_backward(
      *qkv_out_, att_, dout, B, T, local_dim_, local_heads_, dqkv_, datt_,
      nn::attention_dropout(ctx, drop_, int64_t(tp_->rank()) * local_heads_));
  return qkv_.backward(dqkv_, ctx);
}

void ParallelAttention::collect_parameters(std::vector<nn::Parameter*>& out) {
  qkv_.collect_parameters(out);
  proj_.collect_parameters(out);
}

void ParallelAttention::collect_shards(std::vector<Sharded>& out) {
  qkv_.collect_shards(out);
  proj_.collect_shards(out);
}

void ParallelAttention::release_activations() {
  qkv_.release_activations();
  proj_.release_activations();
  drop_.release_activations();
  att_.release();
  o_.release();
  dqkv_.release();
  datt_.release();
}

void ParallelAttention::set_input_grad(bool needed) {
  input_grad_ = needed;
  qkv_.set_input_grad(needed);
}

}  // namespace braid::parallel::tp
