// Token embedding with the table split by vocabulary. A token belongs to
// exactly one rank's range, so the sum over the group of the looked-up rows
// (zeros for tokens outside a rank's range) is the serial row itself, with
// no rounding; the position rows are added after the sum, as the serial
// layer adds them.
#include "braid/error.h"
#include "braid/tp_layers.h"

namespace braid::parallel::tp {

VocabParallelEmbedding::VocabParallelEmbedding(std::string name, int64_t vocab, int64_t dim,
                                               int64_t context, std::shared_ptr<Communicator> tp,
                                               SeqMode mode)
    : Module(name),
      tp_(tp),
      mode_(mode),
      vocab_(vocab),
      dim_(dim),
      context_(context),
      local_vocab_(divide(vocab, tp->size(), "VocabParallelEmbedding " + name + ": vocabulary")),
      v0_(local_vocab_ * tp->rank()),
      wte_(name + ".wte", {local_vocab_, dim}),
      wpe_(name + ".wpe", {context, dim}) {
  BRAID_CHECK_ARG(dim > 0 && context > 0,
                  "VocabParallelEmbedding " + name + ": sizes must be positive");
  if (mode_ == SeqMode::kSequenceParallel)
    reduce_ = std::make_unique<ReduceScatterToSequenceRegion>(name + ".reduce_scatter_seq", tp);
  else
    reduce_ = std::make_unique<ReduceFromTpRegion>(name + ".reduce", tp);
  input_grad_ = false;
}

const Tensor& VocabParallelEmbedding::forward(const Tensor& tokens, nn::Context& ctx) {
  nn::Embedding::check_tokens(name_, tokens, vocab_, context_);
  const int64_t B = tokens.dim(0), T = tokens.dim(1);
  const int32_t* tok = tokens.i32();
  partial_.resize({B, T, dim_}, DType::kF32);
  const float* wte = wte_.data.f32();
  float* p = partial_.f32();
  for (int64_t i = 0; i < B * T; ++i) {
    float* pr = p + i * dim_;
    int64_t local = int64_t(tok[i]) - v0_;
    if (local >= 0 && local < local_vocab_) {
      const float* e = wte + local * dim_;
      for (int64_t c = 0; c < dim_; ++c) pr[c] = e[c];
    } else {
      for (int64_t c = 0; c < dim_; ++c) pr[c] = 0.0f;
    }
  }
  const Tensor& summed = reduce_->forward(partial_, ctx);  // [B, T or T/n, C]
  const int64_t t_here = summed.dim(1);
  const int64_t t0 = mode_ == SeqMode::kSequenceParallel ? t_here * tp_->rank() : 0;
  y_.resize(summed.shape(), DType::kF32);
  const float* s = summed.f32();
  const float* wpe = wpe_.data.f32();
  float* y = y_.f32();
  for (int64_t i = 0; i < B * t_here; ++i) {
    const float* pos = wpe + (t0 + i % t_here) * dim_;
    for (int64_t c = 0; c < dim_; ++c) y[i * dim_ + c] = s[i * dim_ + c] + pos[c];
  }
  tokens_ = &tokens;
  return y_;
}

const Tensor& VocabParallelEmbedding::backward(const Tensor& dy, nn::Context& ctx) {
  BRAID_CHECK_ARG(tokens_ != nullptr, "Embedding " + name_ + ": backward before forward");
  check_same_shape(dy, y_, "Embedding " + name_ + " backward: dy vs y");
  // Positions first, from this rank's rows of dy (all of them, or its
  // sequence shard: then the gradient is partial and summed by the model).
  const int64_t t_here = dy.dim(1);
  const int64_t t0 = mode_ == SeqMode::kSequenceParallel ? t_here * tp_->rank() : 0;
  const float* d = dy.f32();
  float* gpe = wpe_.grad.f32();
  for (int64_t i = 0; i < dy.dim(0) * t_here; ++i) {
    float* g = gpe + (t0 + i % t_here) * dim_;
    for (int64_t c = 0; c < dim_; ++c) g[c] += d[i * dim_ + c];
  }
  const Tensor& full = reduce_->backward(dy, ctx);  // [B, T, C] on every rank
  const int64_t n = tokens_->numel();
  const int32_t* tok = tokens_->i32();
  const float* f = full.f32();
  float* gte = wte_.grad.f32();
  for (int64_t i = 0; i < n; ++i) {
    int64_t local = int64_t(tok[i]) - v0_;
    if (local < 0 || local >= local_vocab_) continue;
    float* g = gte + local * dim_;
    for (int64_t c = 0; c < dim_; ++c) g[c] += f[i * dim_ + c];
  }
  ctx.param_ready(wte_);
  ctx.param_ready(wpe_);
  return empty_;
}

void VocabParallelEmbedding::collect_parameters(std::vector<nn::Parameter*>& out) {
  out.push_back(&wte_);
  out.push_back(&wpe_);
}

void VocabParallelEmbedding::collect_shards(std::vector<Sharded>& out) {
  out.push_back({&wte_, ShardSpec{0, 1, false}, Shape{vocab_, dim_}});
  out.push_back(
      {&wpe_, ShardSpec{-1, 1, mode_ == SeqMode::kSequenceParallel}, Shape{context_, dim_}});
}

void VocabParallelEmbedding::release_activations() {
  partial_.release();
  y_.release();
}

}  // namespace braid::parallel::tp
