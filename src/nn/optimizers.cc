// SGD with momentum and AdamW: one fused, vectorised pass per parameter.
#include "../tensor/simd.h"  // first: sets vectorisation options
#include <cmath>

#include "braid/checkpoint.h"
#include "braid/error.h"
#include "braid/kernels.h"
#include "braid/optim.h"

namespace braid::nn {

Tensor& Optimizer::state(const Parameter& p, const char* slot) {
  std::string key = p.name + "/" + slot;
  auto it = state_.find(key);
  if (it == state_.end()) it = state_.emplace(key, Tensor(p.data.shape())).first;
  return it->second;
}

void Optimizer::save_state(Checkpoint& ck) const {
  for (const auto& [key, t] : state_)
    ck.tensors.insert_or_assign("optim/" + key,
                                Tensor::view(const_cast<void*>(t.raw()), t.shape()));
  ck.meta["optim/kind"] = kind();
  ck.meta["optim/steps"] = std::to_string(steps_);
}

void Optimizer::load_state(const Checkpoint& ck, const std::vector<Parameter*>& params) {
  auto k = ck.meta.find("optim/kind");
  if (k == ck.meta.end() || k->second != kind())
    throw Error(Errc::kCorrupt, std::string("checkpoint has optimizer '") +
                                    (k == ck.meta.end() ? "none" : k->second) + "', expected '" +
                                    kind() + "'");
  auto s = ck.meta.find("optim/steps");
  steps_ = s == ck.meta.end() ? 0 : std::stoll(s->second);
  if (steps_ == 0) return;  // nothing was created yet
  for (Parameter* p : params) {
    for (const char* slot : slots()) {
      std::string key = "optim/" + p->name + "/" + slot;
      auto it = ck.tensors.find(key);
      if (it == ck.tensors.end())
        throw Error(Errc::kCorrupt, "checkpoint lacks optimizer state " + key);
      if (it->second.shape() != p->data.shape())
        throw Error(Errc::kCorrupt, "checkpoint " + key + " has shape " +
                                        shape_str(it->second.shape()) + " vs parameter " +
                                        shape_str(p->data.shape()));
      state(*p, slot).copy_from(it->second);
    }
  }
}

namespace {
BRAID_SIMD_FN void sgd_update_range(float* w, const float* g, float* buf, int64_t n, float lr, float mu,
                              float wd) {
  for (int64_t i = 0; i < n; ++i) {
    float gi = g[i] + wd * w[i];
    float b = mu * buf[i] + gi;
    buf[i] = b;
    w[i] -= lr * b;
  }
}
BRAID_SIMD_FN void sgd_plain_range(float* w, const float* g, int64_t n, float lr, float wd) {
  for (int64_t i = 0; i < n; ++i) w[i] -= lr * (g[i] + wd * w[i]);
}
BRAID_SIMD_FN void adamw_update_range(float* w, const float* g, float* m, float* v, int64_t n,
                                float lr_decay, float b1, float b2, float step_size,
                                float sqrt_bc2, float eps) {
  const float step_scaled = step_size * sqrt_bc2, eps_scaled = eps * sqrt_bc2;
  for (int64_t i = 0; i < n; ++i) {
    float gi = g[i];
    float mi = b1 * m[i] + (1.0f - b1) * gi;
    float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    // step·m / (√v / √bc2 + eps) with one divide: (step·√bc2)·m / (√v + eps·√bc2).
    float wi = w[i] * lr_decay;
    w[i] = wi - step_scaled * mi / (std::sqrt(vi) + eps_scaled);
  }
}
constexpr int64_t kParallelMin = 1 << 17;
}  // namespace

void sgd_update(float* w, const float* g, float* buf, int64_t n, float lr, float mu, float wd) {
  if (mu == 0.0f) {
    simd::parallel_ranges(n, kParallelMin,
                          [&](int64_t b, int64_t e) { sgd_plain_range(w + b, g + b, e - b, lr, wd); });
    return;
  }
  simd::parallel_ranges(n, kParallelMin, [&](int64_t b, int64_t e) {
    sgd_update_range(w + b, g + b, buf + b, e - b, lr, mu, wd);
  });
}

void adamw_update(float* w, const float* g, float* m, float* v, int64_t n, float lr, int64_t t,
                  float b1, float b2, float eps, float wd) {
  BRAID_CHECK_ARG(t >= 1, "AdamW update count must start at 1, got " + std::to_string(t));
  const double bc1 = 1.0 - std::pow(double(b1), double(t));
  const double bc2 = 1.0 - std::pow(double(b2), double(t));
  const float step_size = float(lr / bc1), sqrt_bc2 = float(std::sqrt(bc2));
  const float lr_decay = 1.0f - lr * wd;
  simd::parallel_ranges(n, kParallelMin, [&](int64_t b, int64_t e) {
    adamw_update_range(w + b, g + b, m + b, v + b, e - b, lr_decay, b1, b2, step_size, sqrt_bc2,
                       eps);
  });
}

std::vector<const char*> Sgd::slots() const {
  if (momentum_ != 0.0f) return {"momentum"};
  return {};
}

void Sgd::step(const std::vector<Parameter*>& params, float lr) {
  ++steps_;
  for (Parameter* p : params) {
    const float wd = p->decay ? weight_decay_ : 0.0f;
    float* buf = momentum_ != 0.0f ? state(*p, "momentum").f32() : nullptr;
    sgd_update(p->data.f32(), p->grad.f32(), buf, p->size(), lr, momentum_, wd);
  }
}

std::vector<const char*> AdamW::slots() const { return {"m", "v"}; }

void AdamW::step(const std::vector<Parameter*>& params, float lr) {
  ++steps_;
  for (Parameter* p : params) {
    Tensor& m = state(*p, "m");
    Tensor& v = state(*p, "v");
    adamw_update(p->data.f32(), p->grad.f32(), m.f32(), v.f32(), p->size(), lr, steps_, beta1_,
                 beta2_, eps_, p->decay ? weight_decay_ : 0.0f);
  }
}

double clip_global_norm(const std::vector<GradPiece>& pieces, double max_norm,
                        const std::function<void(double&)>& sum_over_ranks) {
  double ss = 0;
  for (const GradPiece& p : pieces)
    if (p.counted) ss += sum_squares(p.g, p.n);
  if (sum_over_ranks) sum_over_ranks(ss);
  const double norm = std::sqrt(ss);
  if (max_norm > 0 && norm > max_norm) {
    const float k = float(max_norm / (norm + 1e-6));
    for (const GradPiece& p : pieces)
      for (int64_t i = 0; i < p.n; ++i) p.g[i] *= k;
  }
  return norm;
}

double clip_grad_norm(const std::vector<Parameter*>& params, double max_norm) {
  std::vector<GradPiece> pieces;
  pieces.reserve(params.size());
  for (Parameter* p : params) pieces.push_back({p->grad.f32(), p->grad.numel()});
  return clip_global_norm(pieces, max_norm);
}

float LrSchedule::at(int64_t step) const {
  if (warmup > 0 && step < warmup) return base * float(step + 1) / float(warmup);
  if (!cosine || total <= warmup) return base;
  double progress = double(step - warmup) / double(total - warmup);
  if (progress > 1) progress = 1;
  double lo = double(base) * min_ratio;
  return float(lo + 0.5 * (double(base) - lo) * (1.0 + std::cos(M_PI * progress)));
}

}  // namespace braid::nn
