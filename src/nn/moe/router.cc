// Router: the linear gate, softmax, top-k choice, per-group capacity with
// deterministic dropping and the load-balancing loss, forward and backward
// (moe.h has the rules).
#include <algorithm>
#include <cmath>

#include "braid/error.h"
#include "braid/kernels.h"
#include "braid/moe.h"

namespace braid::nn {

void check_moe(const MoeConfig& c, int ep) {
  BRAID_CHECK_ARG(c.experts >= 1, "MoE: experts " + std::to_string(c.experts) + " (at least 1)");
  BRAID_CHECK_ARG(c.top_k >= 1, "MoE: top-k " + std::to_string(c.top_k) + " (at least 1)");
  BRAID_CHECK_ARG(c.top_k <= c.experts, "MoE: top-k " + std::to_string(c.top_k) + " > experts " +
                                            std::to_string(c.experts));
  BRAID_CHECK_ARG(c.capacity_factor > 0, "MoE: capacity factor " +
                                             std::to_string(c.capacity_factor) +
                                             " (must be positive)");
  BRAID_CHECK_ARG(c.every >= 1, "MoE: every " + std::to_string(c.every) + " (at least 1)");
  BRAID_CHECK_ARG(c.aux_coef >= 0,
                  "MoE: aux loss coefficient " + std::to_string(c.aux_coef) + " (at least 0)");
  BRAID_CHECK_ARG(c.shadow_rows >= 0, "MoE: shadow rows " + std::to_string(c.shadow_rows) +
                                         " (at least 0; 0: never shadow)");
  BRAID_CHECK_ARG(ep >= 1, "MoE: expert-parallel size " + std::to_string(ep) + " (at least 1)");
  BRAID_CHECK_ARG(c.experts % ep == 0, "MoE: experts " + std::to_string(c.experts) +
                                           " not divisible by the expert-parallel size ep " +
                                           std::to_string(ep));
}

Router::Router(std::string name, int64_t dim, const MoeConfig& c)
    : dim_(dim), experts_(c.experts), c_(c), w_(name + ".weight", {c.experts, dim}) {
  check_moe(c);
}

int64_t Router::capacity(int64_t group) const {
  const double cap = std::ceil(double(c_.capacity_factor) * double(group) * c_.top_k /
                               double(experts_));
  return std::max<int64_t>(1, int64_t(cap));
}

void Router::forward(const float* x, int64_t n, int64_t group) {
  const int64_t E = experts_, k = c_.top_k;
  BRAID_CHECK_ARG(group > 0 && n % group == 0, "MoE router: " + std::to_string(n) +
                                                   " tokens do not split into groups of " +
                                                   std::to_string(group));
  probs_.resize({n, E}, DType::kF32);
  float* p = probs_.f32();
  gemm(false, true, n, E, dim_, 1.0f, x, dim_, w_.data.f32(), dim_, 0.0f, p, E);
  for (int64_t t = 0; t < n; ++t) {
    float* row = p + t * E;
    const float mx = *std::max_element(row, row + E);
    double sum = 0;
    for (int64_t e = 0; e < E; ++e) sum += (row[e] = std::exp(row[e] - mx));
    for (int64_t e = 0; e < E; ++e) row[e] = float(row[e] / sum);
  }
  r_.tokens = n;
  r_.group = group;
  r_.expert.assign(size_t(n * k), 0);
  r_.gate.assign(size_t(n * k), 0.0f);
  r_.slot.assign(size_t(n * k), -1);
  r_.per_expert.assign(size_t(E), 0);
  const int64_t groups = n / group;
  r_.choice_frac.assign(size_t(groups * E), 0.0f);
  r_.dropped = 0;
  r_.aux_sum = 0;
  // Top-k per token: the k largest, ties to the lower index.
  for (int64_t t = 0; t < n; ++t) {
    const float* row = p + t * E;
    for (int64_t j = 0; j < k; ++j) {
      int64_t best = -1;
      for (int64_t e = 0; e < E; ++e) {
        bool taken = false;
        for (int64_t i = 0; i < j; ++i) taken = taken || r_.expert[size_t(t * k + i)] == e;
        if (!taken && (best < 0 || row[e] > row[best])) best = e;
      }
      r_.expert[size_t(t * k + j)] = int32_t(best);
      r_.gate[size_t(t * k + j)] = row[best];
    }
  }
  // Capacity per group: first choices first, then second, each in token order.
  const int64_t cap = capacity(group);
  std::vector<int64_t> used(static_cast<size_t>(E), 0);
  std::vector<char> kept(size_t(n * k), 0);
  for (int64_t b = 0; b < groups; ++b) {
    std::fill(used.begin(), used.end(), 0);
    float* frac = r_.choice_frac.data() + b * E;
    for (int64_t j = 0; j < k; ++j)
      for (int64_t t = b * group; t < (b + 1) * group; ++t) {
        const size_t c = size_t(t * k + j);
        const int64_t e = r_.expert[c];
        frac[e] += 1.0f;
        if (used[size_t(e)] < cap) {
          ++used[size_t(e)];
          kept[c] = 1;
          ++r_.per_expert[size_t(e)];
        } else {
          ++r_.dropped;
        }
      }
    double aux = 0;
    for (int64_t e = 0; e < E; ++e) {
      frac[e] /= float(group * k);
      double pm = 0;
      for (int64_t t = b * group; t < (b + 1) * group; ++t) pm += p[t * E + e];
      aux += double(frac[e]) * pm / double(group);
    }
    r_.aux_sum += double(E) * aux;
  }
  // Slots: expert-major, each expert's rows in (group, choice, token) order.
  std::vector<int64_t> next(size_t(E), 0);
  for (int64_t e = 1; e < E; ++e) next[size_t(e)] = next[size_t(e - 1)] + r_.per_expert[size_t(e - 1)];
  for (int64_t b = 0; b < groups; ++b)
    for (int64_t j = 0; j < k; ++j)
      for (int64_t t = b * group; t < (b + 1) * group; ++t) {
        const size_t c = size_t(t * k + j);
        if (kept[c]) r_.slot[c] = next[size_t(r_.expert[c])]++;
      }
}

void Router::backward(const float* x, const float* dgate, float aux_grad, float* dx,
                      Context& ctx) {
  const int64_t n = r_.tokens, E = experts_, k = c_.top_k, group = r_.group;
  BRAID_CHECK_ARG(n > 0 && probs_.numel() == n * E, "MoE router: backward before forward");
  dprobs_.resize({n, E}, DType::kF32);
  float* dp = dprobs_.f32();
  const float* p = probs_.f32();
  // The aux loss: d(aux_grad · E · Σ_e f_e P_e)/dp[t, e] = aux_grad · E · f_e / T.
  for (int64_t t = 0; t < n; ++t) {
    const float* frac = r_.choice_frac.data() + (t / group) * E;
    for (int64_t e = 0; e < E; ++e)
      dp[t * E + e] = aux_grad * float(E) * frac[e] / float(group);
  }
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const size_t c = size_t(t * k + j);
      if (r_.slot[c] >= 0) dp[t * E + r_.expert[c]] += dgate[c];
    }
  // Softmax backward in place: dlogit = p ⊙ (dp − Σ p·dp).
  for (int64_t t = 0; t < n; ++t) {
    float* d = dp + t * E;
    const float* q = p + t * E;
    double dot = 0;
    for (int64_t e = 0; e < E; ++e) dot += double(q[e]) * d[e];
    for (int64_t e = 0; e < E; ++e) d[e] = q[e] * (d[e] - float(dot));
  }
  gemm(true, false, E, dim_, n, 1.0f, dp, E, x, dim_, 1.0f, w_.grad.f32(), dim_);
  ctx.param_ready(w_);
  if (dx != nullptr) gemm(false, false, n, dim_, E, 1.0f, dp, E, w_.data.f32(), dim_, 1.0f, dx, dim_);
}

}  // namespace braid::nn
