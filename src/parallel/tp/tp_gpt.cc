// The GPT of nn::make_gpt over a tensor-parallel group. Its parameters are
// initialised by building the serial model for the same seed and keeping
// this rank's slices: every parameter then equals the serial one exactly,
// at any group size, with no second copy of the initialisation scheme.
#include <algorithm>
#include <map>

#include "braid/error.h"
#include "braid/tensor_parallel.h"

namespace braid::parallel::tp {

TpGpt::TpGpt(const nn::GptConfig& c, uint64_t seed, std::shared_ptr<Communicator> tp,
             TpGptOptions opts)
    : Module("gpt"), tp_(std::move(tp)), opts_(opts) {
  BRAID_CHECK_ARG(tp_ != nullptr, "TpGpt: no tensor-parallel communicator");
  BRAID_CHECK_ARG(c.vocab > 0 && c.context > 0 && c.layers > 0 && c.dim > 0 && c.heads > 0,
                  "GPT sizes must be positive");
  BRAID_CHECK_ARG(c.dim % c.heads == 0, "GPT: d_model " + std::to_string(c.dim) +
                                            " not divisible by heads " + std::to_string(c.heads));
  const int n = tp_->size();
  // Every split size checked up front, each error naming its size.
  divide(c.heads, n, "GPT heads");
  divide(c.vocab, n, "GPT vocabulary");
  divide(4 * c.dim, n, "GPT MLP hidden size");
  const SeqMode mode =
      opts.sequence_parallel ? SeqMode::kSequenceParallel : SeqMode::kReplicated;
  emb_ = std::make_unique<VocabParallelEmbedding>("emb", c.vocab, c.dim, c.context, tp_, mode);
  for (int64_t l = 0; l < c.layers; ++l)
    blocks_.push_back(std::make_unique<TpTransformerBlock>(
        "h." + std::to_string(l), c.dim, c.heads, tp_, mode, c.dropout, uint64_t(l),
        c.recompute));
  ln_f_ = std::make_unique<nn::LayerNorm>("ln_f", c.dim);
  lm_head_ = std::make_unique<ColumnParallelLinear>("lm_head", c.dim, c.vocab, tp_,
                                                    ColumnParallelLinear::Options{false, 1, false, mode});

  emb_->collect_shards(shards_);
  for (auto& b : blocks_) b->collect_shards(shards_);
  for (nn::Parameter* p : ln_f_->parameters())
    shards_.push_back({p, ShardSpec{-1, 1, opts.sequence_parallel}, p->data.shape()});
  lm_head_->collect_shards(shards_);

  auto serial = nn::make_gpt(c, seed);
  std::map<std::string, nn::Parameter*> by_name;
  for (nn::Parameter* p : serial->parameters()) by_name[p->name] = p;
  if (by_name.size() != shards_.size())
    throw Error(Errc::kInternal, "TpGpt: " + std::to_string(shards_.size()) +
                                     " parameters vs the serial model's " +
                                     std::to_string(by_name.size()));
  for (Sharded& s : shards_) {
    auto it = by_name.find(s.param->name);
    if (it == by_name.end() || it->second->data.shape() != s.full)
      throw Error(Errc::kInternal, "TpGpt: parameter " + s.param->name +
                                       " has no serial twin of shape " + shape_str(s.full));
    s.param->data.copy_from(slice_shard(it->second->data, s.spec, tp_->rank(), n));
  }
}

TpGpt::~TpGpt() = default;

const Tensor& TpGpt::forward(const Tensor& tokens, nn::Context& ctx) {
  if (opts_.sequence_parallel && tokens.ndim() == 2)
    divide(tokens.dim(1), tp_->size(), "TpGpt (sequence parallel): sequence length");
  const Tensor* x = &emb_->forward(tokens, ctx);
  for (auto& b : blocks_) x = &b->forward(*x, ctx);
  return lm_head_->forward(ln_f_->forward(*x, ctx), ctx);
}

const Tensor& TpGpt::backward(const Tensor& dlogits, nn::Context& ctx) {
  const Tensor* d = &ln_f_->backward(lm_head_->backward(dlogits, ctx), ctx);
  for (size_t i = blocks_.size(); i-- > 0;) d = &blocks_[i]->backward(*d, ctx);
  return emb_->backward(*d, ctx);
}

void TpGpt::collect_parameters(std::vector<nn::Parameter*>& out) {
  for (const Sharded& s : shards_) out.push_back(s.param);
}

void TpGpt::release_activations() {
  emb_->release_activations();
  for (auto& b : blocks_) b->release_activations();
  ln_f_->release_activations();
  lm_head_->release_activations();
}

void TpGpt::reduce_partial_grads() {
  int64_t total = 0;
  for (const Sharded& s : shards_)
    if (s.spec.partial_grad) total += s.param->size();
  if (total == 0) return;
  partial_.resize({total}, DType::kF32);
  float* buf = partial_.f32();
  int64_t at = 0;
  for (const Sharded& s : shards_)
    if (s.spec.partial_grad) {
      std::copy_n(s.param->grad.f32(), s.param->size(), buf + at);
      at += s.param->size();
    }
  tp_->all_reduce(buf, buf, size_t(total), DType::kF32, ReduceOp::kSum);
  at = 0;
  for (const Sharded& s : shards_)
    if (s.spec.partial_grad) {
      std::copy_n(buf + at, s.param->size(), s.param->grad.f32());
      at += s.param->size();
    }
}

}  // namespace braid::parallel::tp
