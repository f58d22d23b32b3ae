// The fused kernels against their unfused paths. Linear with its GELU
// fused (Linear::Activation::kGelu) against Linear then GELU — output,
// input gradient, weight and bias gradients — on one thread and on two
// (rows split, per-thread bias sums), in fp32 and bf16 compute. And
// LayerNorm with the pre-norm block's residual add fused into it
// (forward_add, backward_add) against the add and the norm apart. And
// the attention core's dropout on its probabilities, fused into the
// softmax's pass, against softmax, mask and products one at a time.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "braid/error.h"
#include "braid/layers.h"
#include "braid/precision.h"
#include "braid/rng.h"
#include "braid/threads.h"
#include "nn/attention_core.h"

using namespace braid;
using namespace braid::nn;

namespace {

void fill(Tensor& t, uint32_t seed) {
  uint32_t s = seed * 2654435761u + 7;
  for (int64_t i = 0; i < t.numel(); ++i) {
    s = s * 1664525u + 1013904223u;
    t.f32()[i] = (float(s >> 8) / float(1 << 24) - 0.5f) * 2.0f;
  }
}

// Largest |a − b| / (|b| + 1e-3) over the elements.
double rel_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.numel(), b.numel());
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    m = std::max(m, std::fabs(double(a.f32()[i]) - b.f32()[i]) / (std::fabs(b.f32()[i]) + 1e-3));
  return m;
}

void check_fused_against_unfused(int64_t rows, int threads, Precision p, double tol) {
  set_num_threads(threads);
  set_compute_precision(p);
  const int64_t in = 48, out = 96;
  Linear fused("fused", in, out), plain("plain", in, out);
  GELU act("act");
  fused.set_activation(Linear::Activation::kGelu);
  fill(plain.weight().data, 1);
  fill(plain.bias()->data, 2);
  fused.weight().data.copy_from(plain.weight().data);
  fused.bias()->data.copy_from(plain.bias()->data);
  Tensor x({rows, in}), dy({rows, out});
  fill(x, 3);
  fill(dy, 4);
  Context ctx;
  const Tensor& yf = fused.forward(x, ctx);
  const Tensor& yu = act.forward(plain.forward(x, ctx), ctx);
  const Tensor& dxf = fused.backward(dy, ctx);
  const Tensor& dpre = act.backward(dy, ctx);
  const Tensor& dxu = plain.backward(dpre, ctx);
  set_compute_precision(Precision::kF32);
  set_num_threads(1);
  const std::string at = std::string(precision_name(p)) + ", rows " + std::to_string(rows) +
                         ", threads " + std::to_string(threads);
  EXPECT_LE(rel_diff(yf, yu), tol) << "output, " << at;
  EXPECT_LE(rel_diff(dxf, dxu), tol) << "dx, " << at;
  EXPECT_LE(rel_diff(fused.weight().grad, plain.weight().grad), tol) << "dW, " << at;
  // The bias gradient is a sum over the rows, which the two paths add in
  // another order (per thread): its rounding is relative to Σ|terms|.
  for (int64_t c = 0; c < out; ++c) {
    double mag = 0;
    for (int64_t r = 0; r < rows; ++r) mag += std::fabs(dpre.f32()[r * out + c]);
    EXPECT_LE(std::fabs(fused.bias()->grad.f32()[c] - plain.bias()->grad.f32()[c]), tol * mag)
        << "db[" << c << "], " << at;
  }
  // And the fused output is GELU's, not the pre-activation.
  double max_out = 0;
  for (int64_t i = 0; i < yf.numel(); ++i) max_out = std::max(max_out, double(yf.f32()[i]));
  EXPECT_GT(max_out, 0.0);
  for (int64_t i = 0; i < yf.numel(); ++i) ASSERT_GE(yf.f32()[i], -0.2f) << "GELU ≥ −0.17";
}

}  // namespace

// Sums in another order (the bias after the GEMM, not before; the bias
// gradient per thread): f32 rounding, 1e-5 relative with room.
TEST(FusedBiasGelu, MatchesLinearThenGeluOnOneThread) {
  check_fused_against_unfused(64, 1, Precision::kF32, 1e-5);
}
TEST(FusedBiasGelu, MatchesLinearThenGeluOnTwoThreads) {
  // 1024 × 96 outputs: above the size where the rows split over threads.
  check_fused_against_unfused(1024, 2, Precision::kF32, 1e-5);
}
TEST(FusedBiasGelu, MatchesLinearThenGeluInBf16) {
  // Both paths round the same operands to bf16; the outputs differ by the
  // f32 order of the bias add only.
  check_fused_against_unfused(1024, 2, Precision::kBF16, 1e-4);
}

TEST(FusedBiasGelu, NeedsTheBias) {
  Linear no_bias("nb", 4, 4, false);
  EXPECT_THROW(no_bias.set_activation(Linear::Activation::kGelu), Error);
}

namespace {
// The residual add fused into LayerNorm (forward_add, backward_add)
// against vadd then forward, and backward then vadd, on two norms with the
// same parameters. dy is f32, or bf16 (as a bf16-kept input gradient of
// the layer above arrives). `in_place`: backward_add's dx is res itself,
// as the block's second norm runs it.
void check_ln_residual(int64_t rows, int threads, bool dy_bf16, bool in_place) {
  set_num_threads(threads);
  const int64_t d = 80;
  LayerNorm fused("fused", d), plain("plain", d);
  Tensor g({d}), b({d});
  fill(g, 11);
  fill(b, 12);
  for (LayerNorm* ln : {&fused, &plain}) {
    std::vector<Parameter*> ps;
    ln->collect_parameters(ps);
    ps[0]->data.copy_from(g);
    ps[1]->data.copy_from(b);
  }
  Tensor x({rows, d}), a({rows, d}), dy({rows, d}), res({rows, d});
  fill(x, 13);
  fill(a, 14);
  fill(dy, 15);
  fill(res, 16);
  if (dy_bf16) dy = dy.to(DType::kBF16);
  Context ctx;
  // Unfused: h = x + a; y = ln(h); dx = res + lnᵀ(dy).
  Tensor h({rows, d});
  for (int64_t i = 0; i < h.numel(); ++i) h.f32()[i] = x.f32()[i] + a.f32()[i];
  const Tensor& yu = plain.forward(h, ctx);
  const Tensor& dln = plain.backward(dy, ctx);
  Tensor dxu({rows, d});
  for (int64_t i = 0; i < dxu.numel(); ++i) dxu.f32()[i] = res.f32()[i] + dln.f32()[i];
  // Fused.
  Tensor hf;
  const Tensor& yf = fused.forward_add(x, a, hf, ctx);
  Tensor dxf;
  if (in_place) {
    dxf = res;
    fused.backward_add(dy, dxf, dxf, ctx);
  } else {
    fused.backward_add(dy, res, dxf, ctx);
  }
  std::vector<Parameter*> pf, pu;
  fused.collect_parameters(pf);
  plain.collect_parameters(pu);
  set_num_threads(1);
  const std::string at = "rows " + std::to_string(rows) + ", threads " + std::to_string(threads) +
                         (dy_bf16 ? ", bf16 dy" : ", f32 dy") + (in_place ? ", in place" : "");
  // The forward is the same arithmetic in the same order: equal bits.
  for (int64_t i = 0; i < h.numel(); ++i) ASSERT_EQ(hf.f32()[i], h.f32()[i]) << "h, " << at;
  for (int64_t i = 0; i < yu.numel(); ++i) ASSERT_EQ(yf.f32()[i], yu.f32()[i]) << "y, " << at;
  // dx: the same terms, the residual added before the store (maybe as a
  // fused multiply-add): f32 rounding, relative to the two addends (their
  // sum may cancel).
  for (int64_t i = 0; i < dxu.numel(); ++i) {
    const double mag = std::fabs(res.f32()[i]) + std::fabs(dln.f32()[i]);
    ASSERT_LE(std::fabs(dxf.f32()[i] - dxu.f32()[i]), 2e-6 * mag) << "dx[" << i << "], " << at;
  }
  // dγ, dβ: the same chunked sums in the same order on both norms.
  for (int k = 0; k < 2; ++k)
    for (int64_t i = 0; i < d; ++i)
      ASSERT_EQ(pf[k]->grad.f32()[i], pu[k]->grad.f32()[i]) << (k ? "dβ" : "dγ") << ", " << at;
  // And the residual is in dx: the fused result is not the norm's alone.
  EXPECT_GT(rel_diff(dxf, dln), 1e-2) << at;
}

// The parameter gradients summed directly over the rows, in double:
// the chunked partials (added in chunk order, at any thread count) agree.
void check_ln_param_grads(int64_t rows, int threads) {
  set_num_threads(threads);
  const int64_t d = 40;
  LayerNorm ln("ln", d);
  Tensor x({rows, d}), dy({rows, d});
  fill(x, 21);
  fill(dy, 22);
  Context ctx;
  ln.forward(x, ctx);
  ln.backward(dy, ctx);
  std::vector<Parameter*> ps;
  ln.collect_parameters(ps);
  set_num_threads(1);
  for (int64_t i = 0; i < d; ++i) {
    double dg = 0, db = 0, mag = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x.f32() + r * d;
      double m = 0, v = 0;
      for (int64_t j = 0; j < d; ++j) m += xr[j];
      m /= d;
      for (int64_t j = 0; j < d; ++j) v += (xr[j] - m) * (xr[j] - m);
      const double xh = (xr[i] - m) / std::sqrt(v / d + 1e-5);
      dg += dy.f32()[r * d + i] * xh;
      db += dy.f32()[r * d + i];
      mag += std::fabs(dy.f32()[r * d + i]) * (std::fabs(xh) + 1);
    }
    EXPECT_NEAR(ps[0]->grad.f32()[i], dg, 1e-5 * mag) << "dγ[" << i << "], threads " << threads;
    EXPECT_NEAR(ps[1]->grad.f32()[i], db, 1e-5 * mag) << "dβ[" << i << "], threads " << threads;
  }
}
}  // namespace

TEST(FusedResidualLayerNorm, MatchesAddThenNormOnOneThread) {
  check_ln_residual(37, 1, false, false);
  check_ln_residual(37, 1, false, true);
}
TEST(FusedResidualLayerNorm, MatchesAddThenNormOnTwoThreads) {
  // 1000 rows: several 64-row chunks of the backward, split over threads,
  // the last one partial.
  check_ln_residual(1000, 2, false, false);
  check_ln_residual(1000, 2, false, true);
}
TEST(FusedResidualLayerNorm, TakesABf16Gradient) {
  check_ln_residual(1000, 2, true, true);
  check_ln_residual(5, 1, true, false);
}
TEST(FusedResidualLayerNorm, ParameterGradientsAtAnyThreadCount) {
  for (int t : {1, 2}) check_ln_param_grads(1000, t);
}
TEST(FusedResidualLayerNorm, RefusesMismatchedShapesAndAliases) {
  LayerNorm ln("ln", 8);
  Context ctx;
  Tensor x({3, 8}), a({3, 7}), h;
  try {
    ln.forward_add(x, a, h, ctx);
    ADD_FAILURE() << "accepted a [3, 7] residual for a [3, 8] input";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("forward_add"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ln.forward_add(x, x, x, ctx), Error);
  Tensor res({2, 8}), dy({3, 8}), dx;
  ln.forward_add(x, x, h, ctx);
  EXPECT_THROW(ln.backward_add(dy, res, dx, ctx), Error);
}

namespace {
// The attention core with dropout on its probabilities fused into the
// softmax's pass, against the unfused computation in double: softmax,
// then P ⊙ M with M drawn element by element by dropout_mask.h's rule, then
// the products; backward through the same steps one at a time.
void check_attention_dropout(Precision prec, double tol) {
  set_num_threads(2);
  set_compute_precision(prec);
  const int64_t B = 2, T = 37, H = 2, D = 8, C = H * D;
  Tensor qkv({B, T, 3 * C}), dout({B, T, C});
  fill(qkv, 31);
  fill(dout, 32);
  AttentionDropout drop{0.3f, 9, 4, 77, 5, 1};
  const DType kept = activation_dtype();
  Tensor att({B, H, T, T}, kept), o({B, T, C}, DType::kF32), dqkv({B, T, 3 * C}, kept),
      datt({B, H, T, T}, kept);
  causal_attention_forward(qkv, B, T, C, H, att, o, drop);
  causal_attention_backward(qkv, att, dout, B, T, C, H, dqkv, datt, drop);
  const Tensor dq32 = dqkv.dtype() == DType::kF32 ? dqkv : dqkv.to(DType::kF32);
  set_compute_precision(Precision::kF32);
  set_num_threads(1);
  const float scale = 1.0f / (1.0f - drop.p);
  const double rs = 1.0 / std::sqrt(double(D));
  int64_t dropped = 0, kept_n = 0;
  // Largest |error|, and largest |value|: compared as their ratio (bf16's
  // rounding is relative to the operands, not to each small result).
  double worst_o = 0, worst_d = 0, max_o = 0, max_d = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      auto at = [&](int64_t t, int64_t part, int64_t i) {
        return double(qkv.f32()[(b * T + t) * 3 * C + part * C + h * D + i]);
      };
      std::vector<double> P(T * T, 0.0), M(T * T, 0.0), dP(T * T, 0.0);
      for (int64_t t = 0; t < T; ++t) {
        double mx = -1e300, sum = 0;
        std::vector<double> s(t + 1);
        for (int64_t j = 0; j <= t; ++j) {
          double dot = 0;
          for (int64_t i = 0; i < D; ++i) dot += at(t, 0, i) * at(j, 1, i);
          s[j] = dot * rs;
          mx = std::max(mx, s[j]);
        }
        for (int64_t j = 0; j <= t; ++j) sum += std::exp(s[j] - mx);
        for (int64_t j = 0; j <= t; ++j) {
          P[t * T + j] = std::exp(s[j] - mx) / sum;
          const uint64_t e = (uint64_t(1) << 39) + uint64_t((drop.head_offset + h) * T + t) * T + j;
          // dropout_mask.h's rule, from counter_hash itself.
          const uint64_t hash = counter_hash(drop.seed, drop.step,
                                             uint64_t(drop.sample_offset + b), (drop.key << 40) ^ e);
          M[t * T + j] = uniform01(hash) >= drop.p ? scale : 0.0;
          (M[t * T + j] == 0 ? dropped : kept_n) += 1;
        }
      }
      // o = (P ⊙ M) v; dP' = do vᵀ; dv = (P ⊙ M)ᵀ do; dP = dP' ⊙ M;
      // dS = P ⊙ (dP − Σ dP·P); dq = dS k/√D; dk = dSᵀ q/√D.
      for (int64_t t = 0; t < T; ++t)
        for (int64_t i = 0; i < D; ++i) {
          double ov = 0;
          for (int64_t j = 0; j <= t; ++j) ov += P[t * T + j] * M[t * T + j] * at(j, 2, i);
          const double got = o.f32()[(b * T + t) * C + h * D + i];
          worst_o = std::max(worst_o, std::fabs(got - ov));
          max_o = std::max(max_o, std::fabs(ov));
        }
      auto dov = [&](int64_t t, int64_t i) { return double(dout.f32()[(b * T + t) * C + h * D + i]); };
      std::vector<double> dS(T * T, 0.0);
      for (int64_t t = 0; t < T; ++t) {
        double rowdot = 0;
        for (int64_t j = 0; j <= t; ++j) {
          double d = 0;
          for (int64_t i = 0; i < D; ++i) d += dov(t, i) * at(j, 2, i);
          dP[t * T + j] = d * M[t * T + j];
          rowdot += dP[t * T + j] * P[t * T + j];
        }
        for (int64_t j = 0; j <= t; ++j) dS[t * T + j] = P[t * T + j] * (dP[t * T + j] - rowdot);
      }
      auto check = [&](int64_t t, int64_t part, int64_t i, double want) {
        const double got = dq32.f32()[(b * T + t) * 3 * C + part * C + h * D + i];
        worst_d = std::max(worst_d, std::fabs(got - want));
        max_d = std::max(max_d, std::fabs(want));
      };
      for (int64_t t = 0; t < T; ++t)
        for (int64_t i = 0; i < D; ++i) {
          double dq = 0, dk = 0, dv = 0;
          for (int64_t j = 0; j <= t; ++j) dq += dS[t * T + j] * at(j, 1, i) * rs;
          for (int64_t u = t; u < T; ++u) {
            dk += dS[u * T + t] * at(u, 0, i) * rs;
            dv += P[u * T + t] * M[u * T + t] * dov(u, i);
          }
          check(t, 0, i, dq);
          check(t, 1, i, dk);
          check(t, 2, i, dv);
        }
    }
  const std::string at = precision_name(prec);
  EXPECT_LE(worst_o / max_o, tol) << "o, " << at;
  EXPECT_LE(worst_d / max_d, tol) << "dqkv, " << at;
  std::printf("%s: largest error / largest value: o %.1e, dqkv %.1e\n", at.c_str(),
              worst_o / max_o, worst_d / max_d);
  // The mask drops about p of the probabilities (binomial, n ≈ 2800).
  const double frac = double(dropped) / double(dropped + kept_n);
  EXPECT_GT(frac, 0.25) << at;
  EXPECT_LT(frac, 0.35) << at;
}
}  // namespace

TEST(FusedAttentionDropout, MatchesSoftmaxThenMaskThenProducts) {
  check_attention_dropout(Precision::kF32, 1e-5);
}
TEST(FusedAttentionDropout, MatchesInBf16) {
  // q, k, v, P, dS as GEMM operands rounded to bf16 (2^-8 relative),
  // P kept in bf16 for softmax's backward: a few 2^-8.
  check_attention_dropout(Precision::kBF16, 2e-2);
}
TEST(FusedAttentionDropout, IsOffOutsideTrainingAndAtZero) {
  Dropout on("d", 0.2f, 3), off("d", 0.0f, 3);
  Context ctx;
  EXPECT_GT(attention_dropout(ctx, on, 0).p, 0.0f);
  EXPECT_EQ(attention_dropout(ctx, off, 0).p, 0.0f);
  ctx.training = false;
  EXPECT_EQ(attention_dropout(ctx, on, 0).p, 0.0f);
}
