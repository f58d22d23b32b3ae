// The DLRM-like model: bottom MLP, one embedding bag per feature, the
// pairwise-dot (or concatenation) interaction and the top MLP. The layout
// of the input and the interaction are described in include/braid/dlrm.h.
#include "braid/dlrm.h"

#include <cmath>

#include "braid/error.h"
#include "braid/rng.h"

namespace braid::nn {

namespace {

constexpr int64_t kMaxRows = int64_t(1) << 24;  // ids stay exact as f32
constexpr uint64_t kInitTag = 0xd12a;

// Linear + ReLU for each size step; `relu_last` adds one after the last.
void build_mlp(Sequential& m, const std::vector<int64_t>& sizes, bool relu_last) {
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    m.emplace<Linear>(m.name() + ".fc" + std::to_string(i + 1), sizes[i], sizes[i + 1]);
    if (i + 2 < sizes.size() || relu_last)
      m.emplace<ReLU>(m.name() + ".relu" + std::to_string(i + 1));
  }
}

void check_config(const DlrmConfig& c) {
  BRAID_CHECK_ARG(c.dense >= 1, "dlrm: dense must be at least 1, got " + std::to_string(c.dense));
  BRAID_CHECK_ARG(c.features() >= 1, "dlrm: at least one categorical feature is needed");
  BRAID_CHECK_ARG(c.bag >= 1, "dlrm: bag must be at least 1, got " + std::to_string(c.bag));
  BRAID_CHECK_ARG(c.dim >= 1, "dlrm: dim must be at least 1, got " + std::to_string(c.dim));
  for (int64_t f = 0; f < c.features(); ++f)
    BRAID_CHECK_ARG(c.rows[size_t(f)] >= 1 && c.rows[size_t(f)] <= kMaxRows,
                    "dlrm: rows of feature " + std::to_string(f) + " must be in [1, 2^24], got " +
                        std::to_string(c.rows[size_t(f)]));
  for (int64_t h : c.bottom) BRAID_CHECK_ARG(h >= 1, "dlrm: bottom MLP sizes must be positive");
  for (int64_t h : c.top) BRAID_CHECK_ARG(h >= 1, "dlrm: top MLP sizes must be positive");
}

std::vector<int64_t> with_ends(int64_t in, const std::vector<int64_t>& hidden, int64_t out) {
  std::vector<int64_t> s{in};
  s.insert(s.end(), hidden.begin(), hidden.end());
  s.push_back(out);
  return s;
}

}  // namespace

int64_t DlrmConfig::interaction_width() const {
  const int64_t v = features() + 1;  // z0 and one vector per table
  return interaction == Interaction::kDot ? dim + v * (v - 1) / 2 : dim * v;
}

DlrmConfig dlrm_config_for(const ClickConfig& data, int64_t dim) {
  DlrmConfig c;
  c.dense = data.dense;
  c.rows.assign(size_t(data.features), data.rows);
  c.bag = data.bag;
  c.dim = dim;
  return c;
}

void dlrm_table_init(const DlrmConfig& cfg, uint64_t seed, int64_t f, int64_t row_begin,
                     int64_t row_end, int64_t col_begin, int64_t col_end, float* out) {
  BRAID_CHECK_ARG(f >= 0 && f < cfg.features(),
                  "dlrm_table_init: feature " + std::to_string(f) + " outside [0, " +
                      std::to_string(cfg.features()) + ")");
  const int64_t rows = cfg.rows[size_t(f)];
  BRAID_CHECK_ARG(0 <= row_begin && row_begin <= row_end && row_end <= rows && 0 <= col_begin &&
                      col_begin <= col_end && col_end <= cfg.dim,
                  "dlrm_table_init: block rows [" + std::to_string(row_begin) + ", " +
                      std::to_string(row_end) + ") columns [" + std::to_string(col_begin) +
                      ", " + std::to_string(col_end) + ") outside table " + std::to_string(f) +
                      " [" + std::to_string(rows) + ", " + std::to_string(cfg.dim) + "]");
  // The parameter index: the bottom MLP's weights and biases come first.
  const uint64_t index = uint64_t(2 * (cfg.bottom.size() + 1) + size_t(f));
  CounterRng rng(counter_hash(seed, kInitTag, index));
  const float bound = 1.0f / std::sqrt(float(rows));
  const int64_t w = col_end - col_begin;
  for (int64_t r = row_begin; r < row_end; ++r) {
    rng.set_counter(uint64_t(r * cfg.dim + col_begin));  // element r·dim + c draws counter it
    float* o = out + (r - row_begin) * w;
    for (int64_t c = 0; c < w; ++c) o[c] = (2.0f * rng.uniform() - 1.0f) * bound;
  }
}

Dlrm::Dlrm(std::string name, DlrmConfig cfg, uint64_t seed, std::unique_ptr<DlrmTables> tables)
    : Module(std::move(name)), cfg_(std::move(cfg)), bottom_("bot"), top_("top"),
      tables_(std::move(tables)) {
  check_config(cfg_);
  build_mlp(bottom_, with_ends(cfg_.dense, cfg_.bottom, cfg_.dim), true);
  if (!tables_)
    for (int64_t f = 0; f < cfg_.features(); ++f)
      bags_.push_back(std::make_unique<EmbeddingBag>("emb." + std::to_string(f),
                                                     cfg_.rows[size_t(f)], cfg_.dim, cfg_.mode));
  build_mlp(top_, with_ends(cfg_.interaction_width(), cfg_.top, 1), false);
  bottom_.set_input_grad(false);
  ids_.resize(size_t(cfg_.features()));
  e_.resize(size_t(cfg_.features()));
  de_.resize(size_t(cfg_.features()));

  // Parameter indices: bottom MLP, then one per table, then the top MLP,
  // whether or not the tables are local (dlrm_table_init keys them so).
  auto init_linear = [&](Parameter* p, uint64_t index) {
    // Linear weight [out, in]: N(0, 2/(in+out)); bias [out]: N(0, 1/out).
    CounterRng rng(counter_hash(seed, kInitTag, index));
    float* d = p->data.f32();
    const Shape& s = p->data.shape();
    const float std = s.size() == 2 ? std::sqrt(2.0f / float(s[0] + s[1]))
                                    : std::sqrt(1.0f / float(s[0]));
    for (int64_t i = 0; i < p->size(); ++i) d[i] = rng.normal() * std;
  };
  uint64_t index = 0;
  for (Parameter* p : bottom_.parameters()) init_linear(p, index++);
  for (int64_t f = 0; f < cfg_.features(); ++f, ++index)
    if (!tables_)
      dlrm_table_init(cfg_, seed, f, 0, cfg_.rows[size_t(f)], 0, cfg_.dim,
                      bags_[size_t(f)]->weight().data.f32());
  for (Parameter* p : top_.parameters()) init_linear(p, index++);
}

EmbeddingBag& Dlrm::table(int64_t f) {
  BRAID_CHECK_ARG(!tables_, "dlrm " + name_ + ": the tables are not local EmbeddingBags");
  BRAID_CHECK_ARG(f >= 0 && f < cfg_.features(), "dlrm " + name_ + ": no table " + std::to_string(f));
  return *bags_[size_t(f)];
}

void dlrm_split_input(const DlrmConfig& cfg, const Tensor& x, Tensor& dense,
                      std::vector<Tensor>& ids, const std::string& who) {
  x.check_shape({-1, cfg.input_width()}, who + " input");
  const int64_t B = x.dim(0), D = cfg.dense, W = cfg.input_width(), bag = cfg.bag;
  dense.resize({B, D}, DType::kF32);
  ids.resize(size_t(cfg.features()));
  for (auto& t : ids) t.resize({B, bag}, DType::kI32);
  const float* xp = x.f32();
  float* dp = dense.f32();
  for (int64_t b = 0; b < B; ++b) {
    const float* row = xp + b * W;
    for (int64_t d = 0; d < D; ++d) dp[b * D + d] = row[d];
    for (int64_t f = 0; f < cfg.features(); ++f) {
      int32_t* out = ids[size_t(f)].i32() + b * bag;
      for (int64_t j = 0; j < bag; ++j) {
        const float v = row[D + f * bag + j];
        // The table checks the range; an id must first be an exact integer.
        if (!(v >= -1.0f && v < float(kMaxRows)) || v != std::floor(v))
          throw Error(Errc::kInvalidArgument, who + ": feature " + std::to_string(f) +
                                                  " of sample " + std::to_string(b) +
                                                  " holds id " + std::to_string(v) +
                                                  ", not an integer id (−1 is padding)");
        out[j] = int32_t(v);
      }
    }
  }
}

const Tensor& Dlrm::forward(const Tensor& x, Context& ctx) {
  dlrm_split_input(cfg_, x, dense_, ids_, "dlrm " + name_);
  z0_ = &bottom_.forward(dense_, ctx);
  if (tables_)
    tables_->forward(ids_, e_, ctx);
  else
    for (int64_t f = 0; f < cfg_.features(); ++f)
      e_[size_t(f)] = &bags_[size_t(f)]->forward(ids_[size_t(f)], ctx);
  interact(x.dim(0));
  return top_.forward(inter_, ctx);
}

void Dlrm::interact(int64_t B) {
  const int64_t dim = cfg_.dim, F = cfg_.features(), W = cfg_.interaction_width();
  inter_.resize({B, W}, DType::kF32);
  float* out = inter_.f32();
  auto vec = [&](int64_t v, int64_t b) {  // v_0 = z0, v_{f+1} = e_f
    return (v == 0 ? z0_->f32() : e_[size_t(v - 1)]->f32()) + b * dim;
  };
  for (int64_t b = 0; b < B; ++b) {
    float* o = out + b * W;
    const float* z0 = vec(0, b);
    for (int64_t c = 0; c < dim; ++c) o[c] = z0[c];
    int64_t k = dim;
    if (cfg_.interaction == DlrmConfig::Interaction::kCat) {
      for (int64_t v = 1; v <= F; ++v, k += dim) {
        const float* e = vec(v, b);
        for (int64_t c = 0; c < dim; ++c) o[k + c] = e[c];
      }
      continue;
    }
    for (int64_t i = 1; i <= F; ++i)
      for (int64_t j = 0; j < i; ++j, ++k) {
        const float *a = vec(i, b), *c2 = vec(j, b);
        float s = 0;
        for (int64_t c = 0; c < dim; ++c) s += a[c] * c2[c];
        o[k] = s;
      }
  }
}

void Dlrm::interact_backward(const Tensor& dinter, int64_t B) {
  const int64_t dim = cfg_.dim, F = cfg_.features(), W = cfg_.interaction_width();
  dz0_.resize({B, dim}, DType::kF32);
  dz0_.zero();
  for (auto& t : de_) {
    t.resize({B, dim}, DType::kF32);
    t.zero();
  }
  auto vec = [&](int64_t v, int64_t b) {
    return (v == 0 ? z0_->f32() : e_[size_t(v - 1)]->f32()) + b * dim;
  };
  auto grad = [&](int64_t v, int64_t b) {
    return (v == 0 ? dz0_.f32() : de_[size_t(v - 1)].f32()) + b * dim;
  };
  const float* g = dinter.f32();
  for (int64_t b = 0; b < B; ++b) {
    const float* gb = g + b * W;
    float* dz0 = grad(0, b);
    for (int64_t c = 0; c < dim; ++c) dz0[c] += gb[c];
    int64_t k = dim;
    if (cfg_.interaction == DlrmConfig::Interaction::kCat) {
      for (int64_t v = 1; v <= F; ++v, k += dim) {
        float* de = grad(v, b);
        for (int64_t c = 0; c < dim; ++c) de[c] += gb[k + c];
      }
      continue;
    }
    // d(v_i·v_j) = g·v_j for v_i and g·v_i for v_j.
    for (int64_t i = 1; i <= F; ++i)
      for (int64_t j = 0; j < i; ++j, ++k) {
        const float s = gb[k];
        const float *vi = vec(i, b), *vj = vec(j, b);
        float *gi = grad(i, b), *gj = grad(j, b);
        for (int64_t c = 0; c < dim; ++c) {
          gi[c] += s * vj[c];
          gj[c] += s * vi[c];
        }
      }
  }
}

const Tensor& Dlrm::backward(const Tensor& dy, Context& ctx) {
  BRAID_CHECK_ARG(z0_ != nullptr, "dlrm " + name_ + ": backward before forward");
  const Tensor& dinter = top_.backward(dy, ctx);
  interact_backward(dinter, dy.dim(0));
  if (tables_)
    tables_->backward(de_, ctx);
  else
    for (int64_t f = cfg_.features(); f-- > 0;) bags_[size_t(f)]->backward(de_[size_t(f)], ctx);
  bottom_.backward(dz0_, ctx);
  return empty_;
}

void Dlrm::collect_parameters(std::vector<Parameter*>& out) {
  bottom_.collect_parameters(out);
  if (tables_) tables_->collect_parameters(out);
  for (auto& b : bags_) b->collect_parameters(out);
  top_.collect_parameters(out);
}

void Dlrm::release_activations() {
  bottom_.release_activations();
  if (tables_) tables_->release_activations();
  for (auto& b : bags_) b->release_activations();
  top_.release_activations();
  inter_.release();
  dz0_.release();
  for (auto& t : de_) t.release();
}

void Dlrm::set_dense_table_grads(bool on) {
  for (auto& b : bags_) b->set_dense_grad(on);
}

std::unique_ptr<Sequential> make_dlrm(const DlrmConfig& cfg, uint64_t seed,
                                      std::unique_ptr<DlrmTables> tables) {
  auto m = std::make_unique<Sequential>("dlrm");
  m->emplace<Dlrm>("dlrm", cfg, seed, std::move(tables));
  m->set_input_grad(false);
  return m;
}

}  // namespace braid::nn
