// The element-wise probe behind `this-machine` (braid/plan_probe.h): one
// core's rate for each memory-bound pass of braid's GPT block and for the
// optimizer, timed through the kernels the layers run and expressed in the
// bytes the planner counts for that pass (docs/PLAN.md, "The cost model").
#include <algorithm>
#include <cstdio>
#include <deque>
#include <nlohmann/json.hpp>
#include <vector>

#include "braid/env.h"
#include "braid/error.h"
#include "braid/kernels.h"
#include "braid/layers.h"
#include "braid/optim.h"
#include "braid/plan_probe.h"
#include "nn/attention_core.h"
#include "nn/bias_gelu.h"
#include "plan/probe/best_rate.h"
#include "plan/probe/tuning_json.h"

namespace braid::plan {
namespace {

// The default GPT's shapes (braid train gpt: d_model 256, 4 heads, context
// 128) at 16 sequences: 2048 tokens.
constexpr int64_t kRows = 2048, kDim = 256, kHeads = 4, kSeq = 128;
// Each pass runs over kSets copies of its buffers in turn, together about
// 2.5× a 32 MiB last-level cache: a training step's activations (hundreds
// of MB) are far beyond the cache, and a pass reads what an earlier pass
// wrote long before.
constexpr int kSets = 8;

// GB/s of `pass` over every set in turn, each run at least 5 ms
// (best_rate): `bytes` (the planner's count) a set.
template <class Pass>
double best_gbps(double bytes, const Pass& pass) {
  return bytes * kSets / 1e9 * best_rate(5e-3, [&] {
           for (int k = 0; k < kSets; ++k) pass(k);
         });
}

}  // namespace

ElementwiseSample probe_elementwise() {
  const CoreShare share;
  const int threads = num_threads();
  set_num_threads(1);
  ElementwiseSample out;
  nn::Context ctx;
  // The planner prices a pass's forward at its count of bytes and its
  // backward at twice that: a forward and a backward are 3× the count.
  {  // h = x + a, then ln(h); backward dx = res + lnᵀ(dy): 5 elements a
     // token and channel forward (the add's 3, the norm's 2).
    std::deque<nn::LayerNorm> ln;  // modules do not move
    std::vector<Tensor> x, a, h, dy, dx;
    for (int k = 0; k < kSets; ++k) {
      ln.emplace_back("ln", kDim);
      for (auto* v : {&x, &a, &h, &dy, &dx}) v->emplace_back(Shape{kRows, kDim});
      std::fill_n(x[k].f32(), kRows * kDim, 0.5f);
      std::fill_n(a[k].f32(), kRows * kDim, 0.25f);
      std::fill_n(dy[k].f32(), kRows * kDim, 0.125f);
    }
    out.norm_gbps = best_gbps(3.0 * 5 * kRows * kDim * 4, [&](int k) {
      ln[size_t(k)].forward_add(x[k], a[k], h[k], ctx);
      ln[size_t(k)].backward_add(dy[k], x[k], dx[k], ctx);
    });
  }
  {  // The MLP's bias + GELU on its [tokens, 4·d] product: 2 elements each
     // forward (read, write).
    const int64_t cols = 4 * kDim, n = kRows * cols;
    std::vector<std::vector<float>> pre(kSets, std::vector<float>(size_t(n), 0.5f)), y = pre,
                                                                                     d = pre;
    std::vector<float> b(static_cast<size_t>(cols), 0.01f), bg(static_cast<size_t>(cols));
    out.gelu_gbps = best_gbps(3.0 * 2 * double(n) * 4, [&](int k) {
      nn::bias_gelu_forward(pre[size_t(k)].data(), b.data(), y[size_t(k)].data(), kRows, cols);
      nn::bias_gelu_backward(pre[size_t(k)].data(), y[size_t(k)].data(), d[size_t(k)].data(),
                             bg.data(), kRows, cols);
    });
  }
  {  // The attention's causal softmax over each head's [T, T] scores: 3
     // elements a score forward (read, write, the mask).
    const int64_t mats = kRows / kSeq * kHeads, n = mats * kSeq * kSeq;
    std::vector<std::vector<float>> s(kSets, std::vector<float>(size_t(n), 0.5f)), d = s;
    out.softmax_gbps = best_gbps(3.0 * 3 * double(n) * 4, [&](int k) {
      nn::softmax_causal_matrices(s[size_t(k)].data(), mats, kSeq);
      nn::softmax_bwd_causal_matrices(s[size_t(k)].data(), d[size_t(k)].data(), mats, kSeq);
    });
  }
  {  // AdamW over a flat shard: 28 bytes a parameter (w, g, m, v read; w,
     // m, v written).
    const int64_t n = 1 << 20;
    std::vector<std::vector<float>> w(kSets, std::vector<float>(size_t(n), 0.5f)), g = w, m = w,
                                                                                   v = w;
    int64_t t = 0;
    out.optimizer_gbps = best_gbps(28.0 * double(n), [&](int k) {
      nn::adamw_update(w[size_t(k)].data(), g[size_t(k)].data(), m[size_t(k)].data(),
                       v[size_t(k)].data(), n, 1e-6f, ++t, 0.9f, 0.999f, 1e-8f, 0.01f);
    });
  }
  set_num_threads(threads);
  out.core_share = share.get();
  return out;
}

std::string merge_elementwise_probe(const std::string& text, const ElementwiseSample& s) {
  nlohmann::json j = tuning_json(text);
  j["elementwise_f32_1thread"] = {{"norm_gbps", s.norm_gbps},
                                  {"gelu_gbps", s.gelu_gbps},
                                  {"softmax_gbps", s.softmax_gbps},
                                  {"optimizer_gbps", s.optimizer_gbps}};
  return j.dump(2) + "\n";
}

std::optional<ElementwiseSample> elementwise_probe_from(const std::string& text,
                                                        const std::string& from) {
  if (text.empty()) return std::nullopt;
  const std::string what = from + ": elementwise_f32_1thread";
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    if (!j.is_object() || !j.contains("elementwise_f32_1thread")) return std::nullopt;
    const nlohmann::json& e = j.at("elementwise_f32_1thread");
    if (!e.is_object()) throw Error(Errc::kInvalidArgument, what + ": must be an object");
    ElementwiseSample s;
    for (auto [key, field] : {std::pair{"norm_gbps", &s.norm_gbps},
                              {"gelu_gbps", &s.gelu_gbps},
                              {"softmax_gbps", &s.softmax_gbps},
                              {"optimizer_gbps", &s.optimizer_gbps}}) {
      if (!e.contains(key) || !e.at(key).is_number() || !(e.at(key).get<double>() > 0))
        throw Error(Errc::kInvalidArgument, what + "." + key + ": must be a number > 0 (GB/s)");
      *field = e.at(key).get<double>();
    }
    return s;
  } catch (const nlohmann::json::exception& e) {
    throw Error(Errc::kInvalidArgument, what + ": " + e.what());
  }
}

}  // namespace braid::plan
