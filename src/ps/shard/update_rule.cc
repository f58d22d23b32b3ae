// SGD with momentum, Adagrad and AdamW on a server's slice. SGD and AdamW
// run nn's own loops (nn::sgd_update / nn::adamw_update, optim.h), so a
// server step is bit for bit an nn optimizer step; Adagrad, which nn does
// not have, is written here.
#include "ps/shard/update_rule.h"

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
    case UpdateRule::kSgd:
      nn::sgd_update(w, g, state, n, lr, r.momentum, decay ? r.weight_decay : 0.0f);
      return;
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
    case UpdateRule::kAdamW:
      nn::adamw_update(w, g, state, state + n, n, lr, t, r.beta1, r.beta2, r.eps,
                       decay ? r.weight_decay : 0.0f);
      return;
  }
}

}  // namespace braid::ps
