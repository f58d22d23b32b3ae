// SGD with momentum, Adagrad and AdamW on a server's slice. The SGD and
// AdamW loops repeat nn/optimizers.cc's arithmetic in the same order: the
// server updates raw slices with per-slice state, which nn::Optimizer (state
// per named Parameter) does not offer; ps/update_rule_test compares the two.
#include "ps/update_rule.h"

#include <cmath>

#include "braid/error.h"

namespace braid::ps {

int UpdateRule::slots() const {
  switch (kind) {
    case kSgd: return momentum != 0.0f ? 1 : 0;
    case kAdagrad: return 1;
    case kAdamW: return 2;
  }
  return 0;
}

UpdateRule::Kind parse_update_rule(const std::string& s) {
  if (s == "sgd") return UpdateRule::kSgd;
  if (s == "adagrad") return UpdateRule::kAdagrad;
  if (s == "adam" || s == "adamw") return UpdateRule::kAdamW;
  throw Error(Errc::kInvalidArgument,
              "update rule '" + s + "' is not one of sgd, adagrad, adam, adamw");
}

void apply_update(const UpdateRule& r, float* w, const float* g, float* state, int64_t n,
                  float lr, int64_t t, bool decay) {
  switch (r.kind) {
    case UpdateRule::kSgd: {
      const float wd = decay ? r.weight_decay : 0.0f, mu = r.momentum;
      if (mu != 0.0f) {
        float* buf = state;
        for (int64_t i = 0; i < n; ++i) {
          float gi = g[i] + wd * w[i];
          float b = mu * buf[i] + gi;
          buf[i] = b;
          w[i] -= lr * b;
        }
      } else {
        for (int64_t i = 0; i < n; ++i) w[i] -= lr * (g[i] + wd * w[i]);
      }
      return;
    }
    case UpdateRule::kAdagrad: {
      const float wd = decay ? r.weight_decay : 0.0f;
      float* h = state;
      for (int64_t i = 0; i < n; ++i) {
        float gi = g[i] + wd * w[i];
        h[i] += gi * gi;
        w[i] -= lr * gi / (std::sqrt(h[i]) + r.eps);
      }
      return;
    }
    case UpdateRule::kAdamW: {
      BRAID_CHECK_ARG(t >= 1, "AdamW update count must start at 1");
      double bc1 = 1.0 - std::pow(double(r.beta1), double(t));
      double bc2 = 1.0 - std::pow(double(r.beta2), double(t));
      const float step_size = float(lr / bc1), sqrt_bc2 = float(std::sqrt(bc2));
      const float step_scaled = step_size * sqrt_bc2, eps_scaled = r.eps * sqrt_bc2;
      const float lr_decay = decay ? 1.0f - lr * r.weight_decay : 1.0f;
      const float b1 = r.beta1, b2 = r.beta2;
      float* m = state;
      float* v = state + n;
      for (int64_t i = 0; i < n; ++i) {
        float gi = g[i];
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float wi = w[i] * lr_decay;
        w[i] = wi - step_scaled * mi / (std::sqrt(vi) + eps_scaled);
      }
      return;
    }
  }
}

}  // namespace braid::ps
