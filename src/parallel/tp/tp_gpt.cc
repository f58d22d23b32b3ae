// The GPT of nn::make_gpt over a tensor-parallel group. Its parameters are
// initialised by building the serial model for the same seed and keeping
// this rank's slices: every parameter then equals the serial one exactly,
// at any group size, with no second copy of the initialisation scheme.
//
// The model is its top-level modules in make_gpt's order, any subset of
// which may be built (a pipeline stage builds its own): forward and
// backward over the whole model need all of them.
#include <algorithm>
#include <atomic>
#include <map>

#include "braid/error.h"
#include "braid/tp_gpt.h"

namespace braid::parallel::tp {

size_t gpt_module_count(const nn::GptConfig& cfg) { return size_t(cfg.layers) + 3; }

std::vector<double> gpt_module_costs(const nn::GptConfig& cfg) {
  const double d = double(cfg.dim), T = double(cfg.context), V = double(cfg.vocab);
  std::vector<double> cost(gpt_module_count(cfg), 12 * d * d + 2 * T * d);
  cost.front() = 2 * d;     // token row + position row
  cost[cost.size() - 2] = 5 * d;  // a layer norm
  cost.back() = d * V;
  return cost;
}

namespace {

// Module i of the GPT with its shards appended to `shards`.
std::unique_ptr<nn::Module> build_module(size_t i, const nn::GptConfig& c,
                                         const std::shared_ptr<Communicator>& tp, SeqMode mode,
                                         std::vector<Sharded>& shards) {
  const size_t L = size_t(c.layers);
  const bool sp = mode == SeqMode::kSequenceParallel;
  if (i == 0) {
    auto emb = std::make_unique<VocabParallelEmbedding>("emb", c.vocab, c.dim, c.context, tp, mode);
    emb->collect_shards(shards);
    return emb;
  }
  if (i <= L) {
    auto b = std::make_unique<TpTransformerBlock>("h." + std::to_string(i - 1), c.dim, c.heads,
                                                  tp, mode, c.dropout, uint64_t(i - 1),
                                                  c.recompute);
    b->collect_shards(shards);
    return b;
  }
  if (i == L + 1) {
    auto ln = std::make_unique<nn::LayerNorm>("ln_f", c.dim);
    for (nn::Parameter* p : ln->parameters())
      shards.push_back({p, ShardSpec{-1, 1, sp}, p->data.shape()});
    return ln;
  }
  auto head = std::make_unique<ColumnParallelLinear>(
      "lm_head", c.dim, c.vocab, tp, ColumnParallelLinear::Options{false, 1, false, mode});
  head->collect_shards(shards);
  return head;
}

std::atomic<int64_t> g_serial_builds{0};

// Copies into every shard its slice of the serial model's parameter of the
// same name and shape.
void init_from_serial(const nn::GptConfig& c, uint64_t seed, std::vector<Sharded>& shards,
                      int rank, int size) {
  g_serial_builds.fetch_add(1, std::memory_order_relaxed);
  auto serial = nn::make_gpt(c, seed);
  std::map<std::string, nn::Parameter*> by_name;
  for (nn::Parameter* p : serial->parameters()) by_name[p->name] = p;
  for (Sharded& s : shards) {
    auto it = by_name.find(s.param->name);
    if (it == by_name.end() || it->second->data.shape() != s.full)
      throw Error(Errc::kInternal, "TpGpt: parameter " + s.param->name +
                                       " has no serial twin of shape " + shape_str(s.full));
    s.param->data.copy_from(slice_shard(it->second->data, s.spec, rank, size));
    by_name.erase(it);
  }
}

}  // namespace

TpGpt::TpGpt(const nn::GptConfig& c, uint64_t seed, std::shared_ptr<Communicator> tp,
             TpGptOptions opts)
    : Module("gpt"), tp_(std::move(tp)), opts_(std::move(opts)) {
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
  const size_t count = gpt_module_count(c);
  std::vector<bool> wanted(count, opts_.modules.empty());
  for (const ModuleRange& r : opts_.modules) {
    BRAID_CHECK_ARG(r.begin < r.end && r.end <= count,
                    "TpGpt: module range [" + std::to_string(r.begin) + ", " +
                        std::to_string(r.end) + ") is empty or outside the GPT's " +
                        std::to_string(count) + " modules");
    for (size_t i = r.begin; i < r.end; ++i) wanted[i] = true;
  }
  const SeqMode mode =
      opts_.sequence_parallel ? SeqMode::kSequenceParallel : SeqMode::kReplicated;
  units_.resize(count);
  for (size_t i = 0; i < count; ++i)
    if (wanted[i]) units_[i] = build_module(i, c, tp_, mode, shards_);
  if (opts_.initialise) init_from_serial(c, seed, shards_, tp_->rank(), n);
}

int64_t TpGpt::serial_builds() { return g_serial_builds.load(std::memory_order_relaxed); }

TpGpt::~TpGpt() = default;

nn::Module& TpGpt::module(size_t i) const {
  BRAID_CHECK_ARG(has_module(i), "TpGpt: module " + std::to_string(i) + " of " +
                                     std::to_string(units_.size()) + " is not built on this rank");
  return *units_[i];
}

const Tensor& TpGpt::forward(const Tensor& tokens, nn::Context& ctx) {
  for (size_t i = 0; i < units_.size(); ++i) module(i);  // all present, or a clear error
  if (opts_.sequence_parallel && tokens.ndim() == 2)
    divide(tokens.dim(1), tp_->size(), "TpGpt (sequence parallel): sequence length");
  const Tensor* x = &tokens;
  for (auto& u : units_) x = &u->forward(*x, ctx);
  return *x;
}

const Tensor& TpGpt::backward(const Tensor& dlogits, nn::Context& ctx) {
  for (size_t i = 0; i < units_.size(); ++i) module(i);
  const Tensor* d = &dlogits;
  for (size_t i = units_.size(); i-- > 0;) d = &units_[i]->backward(*d, ctx);
  return *d;
}

void TpGpt::collect_parameters(std::vector<nn::Parameter*>& out) {
  for (const Sharded& s : shards_) out.push_back(s.param);
}

void TpGpt::release_activations() {
  for (auto& u : units_)
    if (u) u->release_activations();
}

void reduce_partial_grads(const std::vector<Sharded>& params, Communicator& tp, Tensor& scratch) {
  int64_t total = 0;
  for (const Sharded& s : params)
    if (s.spec.partial_grad) total += s.param->size();
  if (total == 0) return;
  scratch.resize({total}, DType::kF32);
  float* buf = scratch.f32();
  int64_t at = 0;
  for (const Sharded& s : params)
    if (s.spec.partial_grad) {
      std::copy_n(s.param->grad.f32(), s.param->size(), buf + at);
      at += s.param->size();
    }
  tp.all_reduce(buf, buf, size_t(total), DType::kF32, ReduceOp::kSum);
  at = 0;
  for (const Sharded& s : params)
    if (s.spec.partial_grad) {
      std::copy_n(buf + at, s.param->size(), s.param->grad.f32());
      at += s.param->size();
    }
}

}  // namespace braid::parallel::tp
