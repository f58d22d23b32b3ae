#include "braid/models.h"

#include <cmath>

#include "braid/error.h"
#include "braid/rng.h"

namespace braid::nn {

namespace {
void init_uniform(Parameter& p, float bound, uint64_t seed, uint64_t index) {
  float* d = p.data.f32();
  for (int64_t i = 0; i < p.size(); ++i)
    d[i] = (2.0f * uniform01(counter_hash(seed, 0x1417, index, uint64_t(i))) - 1.0f) * bound;
}
void init_normal(Parameter& p, float stddev, uint64_t seed, uint64_t index) {
  CounterRng rng(counter_hash(seed, 0x9e11, index));
  float* d = p.data.f32();
  for (int64_t i = 0; i < p.size(); ++i) d[i] = rng.normal() * stddev;
}
}  // namespace

std::unique_ptr<Sequential> make_mlp(const std::vector<int64_t>& sizes, uint64_t seed) {
  BRAID_CHECK_ARG(sizes.size() >= 2, "an MLP needs at least input and output sizes");
  auto m = std::make_unique<Sequential>("mlp");
  uint64_t index = 0;
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    auto& lin = m->emplace<Linear>("fc" + std::to_string(i + 1), sizes[i], sizes[i + 1]);
    float bound = 1.0f / std::sqrt(float(sizes[i]));
    init_uniform(lin.weight(), bound, seed, index++);
    init_uniform(*lin.bias(), bound, seed, index++);
    if (i + 2 < sizes.size()) m->emplace<ReLU>("relu" + std::to_string(i + 1));
  }
  m->set_input_grad(false);
  return m;
}

std::unique_ptr<Sequential> make_gpt(const GptConfig& c, uint64_t seed) {
  BRAID_CHECK_ARG(c.vocab > 0 && c.context > 0 && c.layers > 0 && c.dim > 0 && c.heads > 0,
                  "GPT sizes must be positive");
  if (c.moe.experts > 0) check_moe(c.moe);
  auto m = std::make_unique<Sequential>("gpt");
  m->emplace<Embedding>("emb", c.vocab, c.dim, c.context);
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string name = "h." + std::to_string(l);
    if (moe_block(c.moe, l))
      m->emplace<MoeTransformerBlock>(name, c.dim, c.heads, c.moe, c.dropout, uint64_t(l),
                                      c.recompute);
    else
      m->emplace<TransformerBlock>(name, c.dim, c.heads, c.dropout, uint64_t(l), c.recompute);
  }
  m->emplace<LayerNorm>("ln_f", c.dim);
  m->emplace<Linear>("lm_head", c.dim, c.vocab, false);
  uint64_t index = 0;
  for (Parameter* p : m->parameters()) {
    bool is_ln = p->name.find(".ln") != std::string::npos || p->name.rfind("ln_f", 0) == 0;
    bool is_bias = p->name.size() > 5 && p->name.compare(p->name.size() - 5, 5, ".bias") == 0;
    if (!is_ln && !is_bias) init_normal(*p, 0.02f, seed, index);
    ++index;
  }
  return m;
}

std::vector<TransformerBlock*> gpt_blocks(Sequential& gpt) {
  std::vector<TransformerBlock*> v;
  for (size_t i = 0; i < gpt.size(); ++i)
    if (auto* b = dynamic_cast<TransformerBlock*>(&gpt.child(i))) v.push_back(b);
  return v;
}

}  // namespace braid::nn
