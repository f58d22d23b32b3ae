// Causal multi-head self-attention, forward and backward.
//
// Per (sample b, head h), with q, k, v the head's [T, d] slices of the qkv
// activation (row stride 3C, read in place by the GEMMs):
//   forward:  S = q kᵀ/√d;  P = softmax over j ≤ t (zeros above the diagonal);
//             o_h = P' v, P' = P ⊙ M (M the dropout mask; P' = P without)
//   backward: dP' = do_h vᵀ;  dv = P'ᵀ do_h;  dP = dP' ⊙ M;
//             dS = P ⊙ (dP − rowsum(dP ⊙ P));  dq = dS k/√d;  dk = dSᵀ q/√d
// The (b, h) pairs run in parallel, each GEMM single-threaded. The GEMMs
// skip the blocks above the diagonal (all zeros in P and dS).
#include "../tensor/simd.h"  // first: sets vectorisation options
#include <algorithm>
#include <cmath>
#include <vector>

#include "braid/error.h"
#include "braid/kernels.h"
#include "braid/layers.h"
#include "braid/precision.h"
#include "nn/attention_core.h"
#include "nn/dropout_mask.h"

namespace braid::nn {

CausalSelfAttention::CausalSelfAttention(std::string name, int64_t dim, int64_t heads,
                                         float dropout, uint64_t dropout_key)
    : Module(name),
      dim_(dim),
      heads_(heads),
      qkv_(name + ".qkv", dim, 3 * dim),
      proj_(name + ".proj", dim, dim),
      drop_(name + ".drop", dropout, dropout_key) {
  qkv_.set_bf16_output(true);       // q, k, v feed the attention GEMMs alone
  proj_.set_bf16_input_grad(true);  // as does d o
  qkv_.set_bf16_input_grad(true);   // the input gradient: to the block's layer norm
  BRAID_CHECK_ARG(heads > 0 && dim % heads == 0,
                  "attention " + name + ": d_model " + std::to_string(dim) +
                      " not divisible by heads " + std::to_string(heads));
}

namespace {
// Rows (and columns) per block of the causal GEMMs: blocks above the
// diagonal are skipped, so the score GEMMs do (1 + T/kBlock)/2 of the full
// work, at T/kBlock calls each.
constexpr int64_t kBlock = 32;

// Row t of a causal score matrix: softmax over [0, t], zeros after.
BRAID_SIMD_FN void softmax_causal(float* s, int64_t T) {
  for (int64_t t = 0; t < T; ++t) {
    float* row = s + t * T;
    float m = row[0];
    for (int64_t j = 1; j <= t; ++j) m = row[j] > m ? row[j] : m;
    float sum = 0;
    for (int64_t j = 0; j <= t; ++j) {
      float e = simd::exp_approx(row[j] - m);
      row[j] = e;
      sum += e;
    }
    float inv = 1.0f / sum;
    for (int64_t j = 0; j <= t; ++j) row[j] *= inv;
    for (int64_t j = t + 1; j < T; ++j) row[j] = 0.0f;
  }
}

// The probabilities' dropout mask M of head h of sample b, [T, T]: row t
// keeps column j ≤ t (value 1/(1 − p)) or drops it (0) by the mask hash
// of element 2^39 + (head·T + t)·T + j (attention_core.h); zeros after t.
void draw_attention_mask(float* m, int64_t T, const AttentionDropout& d, int64_t b, int64_t h) {
  const SampleMask mask(d.seed, d.step, uint64_t(d.sample_offset + b), d.key, d.p);
  const uint64_t e0 = (uint64_t(1) << 39) + uint64_t(d.head_offset + h) * uint64_t(T * T);
  for (int64_t t = 0; t < T; ++t) {
    float* row = m + t * T;
    for (int64_t j = 0; j <= t; ++j) row[j] = mask(e0 + uint64_t(t * T + j));
    for (int64_t j = t + 1; j < T; ++j) row[j] = 0.0f;
  }
}

// out = in ⊙ m over the causal half (m is zero above the diagonal); out
// may be in.
BRAID_SIMD_FN void times_mask(const float* in, const float* m, float* out, int64_t T) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < T; ++j) out[t * T + j] = j <= t ? in[t * T + j] * m[t * T + j] : 0.0f;
}

// dP → dS in place: dS = P ⊙ (dP − Σ_j dP·P).
BRAID_SIMD_FN void softmax_bwd_causal(const float* p, float* d, int64_t T) {
  for (int64_t t = 0; t < T; ++t) {
    const float* pr = p + t * T;
    float* dr = d + t * T;
    float dot = 0;
    for (int64_t j = 0; j <= t; ++j) dot += pr[j] * dr[j];
    for (int64_t j = 0; j <= t; ++j) dr[j] = pr[j] * (dr[j] - dot);
    for (int64_t j = t + 1; j < T; ++j) dr[j] = 0.0f;
  }
}

// Runs body(b, h, bh) for every (sample b, head h) pair, bh = b·H + h: in
// parallel with single-threaded GEMMs when there are threads and more than
// one pair, else in order.
template <class Body>
void for_each_head(int64_t B, int64_t H, const Body& body) {
  if (num_threads() > 1 && B * H > 1) {
    BlasSingleThreaded one;
#pragma omp parallel for schedule(static)
    for (int64_t bh = 0; bh < B * H; ++bh) body(bh / H, bh % H, bh);
  } else {
    for (int64_t bh = 0; bh < B * H; ++bh) body(bh / H, bh % H, bh);
  }
}
}  // namespace

namespace {
// Element `off` of t (f32 or bf16) as a GEMM operand of row stride ld.
GemmOperand operand_at(const Tensor& t, int64_t off, int64_t ld) {
  const auto* p = static_cast<const char*>(t.raw()) + off * int64_t(dtype_size(t.dtype()));
  return {p, t.dtype(), ld};
}

// An f32 block of this thread's, for a head's P or dS ([T, T]) or a part
// of its output ([T, D]) when the buffer that keeps them is bf16, and for
// the probabilities after dropout (slot 3) and the dropout mask (4).
float* head_scratch(int which, int64_t n) {
  thread_local std::vector<float> buf[5];
  if (buf[which].size() < size_t(n)) buf[which].resize(size_t(n));
  return buf[which].data();
}

void check_kept(const Tensor& t, const char* what) {
  if (t.dtype() != DType::kF32 && t.dtype() != DType::kBF16)
    throw Error(Errc::kInvalidArgument, std::string("attention: ") + what + " is " +
                                            dtype_name(t.dtype()) + ", not f32 or bf16");
}
}  // namespace

void softmax_causal_matrices(float* s, int64_t n, int64_t T) {
  for (int64_t i = 0; i < n; ++i) softmax_causal(s + i * T * T, T);
}

void softmax_bwd_causal_matrices(const float* p, float* d, int64_t n, int64_t T) {
  for (int64_t i = 0; i < n; ++i) softmax_bwd_causal(p + i * T * T, d + i * T * T, T);
}

void causal_attention_forward(const Tensor& qkv, int64_t B, int64_t T, int64_t C, int64_t H,
                              Tensor& att, Tensor& o, const AttentionDropout& drop) {
  const int64_t D = C / H;
  const float scale = 1.0f / std::sqrt(float(D));
  check_kept(qkv, "qkv");
  check_kept(att, "att");
  check_kept(o, "o");
  const bool att16 = att.dtype() == DType::kBF16, o16 = o.dtype() == DType::kBF16;
  for_each_head(B, H, [&](int64_t b, int64_t h, int64_t bh) {
    const int64_t q = b * T * 3 * C + h * D, k = q + C, v = q + 2 * C;
    float* s = att16 ? head_scratch(0, T * T) : att.f32() + bh * T * T;
    // A bf16 o: the head's f32 product in scratch, then rounded.
    float* oh = o16 ? head_scratch(1, T * D) : o.f32() + b * T * C + h * D;
    const int64_t ldo = o16 ? D : C;
    // Row block [i0, i1) of S needs only columns [0, i1): the causal half.
    for (int64_t i0 = 0; i0 < T; i0 += kBlock) {
      int64_t i1 = std::min(T, i0 + kBlock);
      gemm_compute(false, true, i1 - i0, i1, D, scale, operand_at(qkv, q + i0 * 3 * C, 3 * C),
                   operand_at(qkv, k, 3 * C), 0.0f, s + i0 * T, T);
    }
    softmax_causal(s, T);
    const float* pv = s;  // P, or P ⊙ M under dropout
    if (drop.p > 0) {
      float* m = head_scratch(4, T * T);
      draw_attention_mask(m, T, drop, b, h);
      float* pm = head_scratch(3, T * T);
      times_mask(s, m, pm, T);
      pv = pm;
    }
    for (int64_t i0 = 0; i0 < T; i0 += kBlock) {
      int64_t i1 = std::min(T, i0 + kBlock);
      gemm_compute(false, false, i1 - i0, D, i1, 1.0f, gemm_operand(pv + i0 * T, T),
                   operand_at(qkv, v, 3 * C), 0.0f, oh + i0 * ldo, ldo);
    }
    if (att16) round_rows_to_bf16(s, T, T, T, att.bf16() + bh * T * T, T);
    if (o16) round_rows_to_bf16(oh, T, D, D, o.bf16() + b * T * C + h * D, C);
  });
}

void causal_attention_backward(const Tensor& qkv, const Tensor& att, const Tensor& dout, int64_t B,
                               int64_t T, int64_t C, int64_t H, Tensor& dqkv, Tensor& datt,
                               const AttentionDropout& drop) {
  const int64_t D = C / H;
  const float scale = 1.0f / std::sqrt(float(D));
  check_kept(qkv, "qkv");
  check_kept(att, "att");
  check_kept(dout, "dout");
  check_kept(datt, "datt");
  check_kept(dqkv, "dqkv");
  const bool att16 = att.dtype() == DType::kBF16, datt16 = datt.dtype() == DType::kBF16;
  const bool dqkv16 = dqkv.dtype() == DType::kBF16;
  for_each_head(B, H, [&](int64_t b, int64_t h, int64_t bh) {
    const int64_t q = b * T * 3 * C + h * D, k = q + C, v = q + 2 * C;
    const int64_t pa = bh * T * T, dh = b * T * C + h * D;
    // Where the GEMMs write d q, d k, d v: in place in an f32 dqkv; for a
    // bf16 one, into scratch, then rounded into place (kept()).
    float* dq = dqkv16 ? head_scratch(2, T * D) : dqkv.f32() + q;
    float* dk = dqkv16 ? head_scratch(2, T * D) : dqkv.f32() + k;
    float* dv = dqkv16 ? head_scratch(2, T * D) : dqkv.f32() + v;
    const int64_t ldd = dqkv16 ? D : 3 * C;
    auto kept = [&](const float* part, int64_t off) {
      if (dqkv16) round_rows_to_bf16(part, T, D, D, dqkv.bf16() + off, 3 * C);
    };
    float* dp = datt16 ? head_scratch(1, T * T) : datt.f32() + pa;
    // Causal blocks only: row block [i0, i1) of dP/dS spans columns [0, i1);
    // column block [j0, j1) of P/dS is nonzero only in rows [j0, T).
    for (int64_t i0 = 0; i0 < T; i0 += kBlock) {
      int64_t i1 = std::min(T, i0 + kBlock);
      gemm_compute(false, true, i1 - i0, i1, D, 1.0f, operand_at(dout, dh + i0 * C, C),
                   operand_at(qkv, v, 3 * C), 0.0f, dp + i0 * T, T);
    }
    const float* p;
    if (att16) {  // P widened (exactly) for softmax's backward
      float* wide = head_scratch(0, T * T);
      convert_bf16_to_f32(att.bf16() + pa, wide, size_t(T * T));
      p = wide;
    } else {
      p = att.f32() + pa;
    }
    // dv = (P ⊙ M)ᵀ do: P as kept, or P ⊙ M drawn again under dropout.
    GemmOperand pv = operand_at(att, pa, T);
    float* m = nullptr;
    if (drop.p > 0) {
      m = head_scratch(4, T * T);
      draw_attention_mask(m, T, drop, b, h);
      float* pm = head_scratch(3, T * T);
      times_mask(p, m, pm, T);
      pv = gemm_operand(pm, T);
    }
    for (int64_t j0 = 0; j0 < T; j0 += kBlock) {
      int64_t j1 = std::min(T, j0 + kBlock);
      const GemmOperand pj{static_cast<const char*>(pv.data) +
                               (j0 * T + j0) * int64_t(dtype_size(pv.dtype)),
                           pv.dtype, T};
      gemm_compute(true, false, j1 - j0, D, T - j0, 1.0f, pj, operand_at(dout, dh + j0 * C, C),
                   0.0f, dv + j0 * ldd, ldd);
    }
    kept(dv, v);
    // d(P ⊙ M) → dP = d(P ⊙ M) ⊙ M, in place.
    if (m) times_mask(dp, m, dp, T);
    softmax_bwd_causal(p, dp, T);
    if (datt16) round_rows_to_bf16(dp, T, T, T, datt.bf16() + pa, T);
    for (int64_t i0 = 0; i0 < T; i0 += kBlock) {
      int64_t i1 = std::min(T, i0 + kBlock);
      gemm_compute(false, false, i1 - i0, D, i1, scale, operand_at(datt, pa + i0 * T, T),
                   operand_at(qkv, k, 3 * C), 0.0f, dq + i0 * ldd, ldd);
    }
    kept(dq, q);
    for (int64_t j0 = 0; j0 < T; j0 += kBlock) {
      int64_t j1 = std::min(T, j0 + kBlock);
      gemm_compute(true, false, j1 - j0, D, T - j0, scale, operand_at(datt, pa + j0 * T + j0, T),
                   operand_at(qkv, q + j0 * 3 * C, 3 * C), 0.0f, dk + j0 * ldd, ldd);
    }
    kept(dk, k);
  });
}

const Tensor& CausalSelfAttention::forward(const Tensor& x, Context& ctx) {
  if (x.ndim() != 3 || x.dim(2) != dim_)
    throw Error(Errc::kInvalidArgument, "attention " + name_ + ": input " + shape_str(x.shape()) +
                                            " vs expected [B, T, " + std::to_string(dim_) + "]");
  const int64_t B = x.dim(0), T = x.dim(1), C = dim_, H = heads_;
  const Tensor& qkv = qkv_.forward(x, ctx);
  qkv_out_ = &qkv;
  att_.resize({B, H, T, T}, activation_dtype());
  o_.resize({B, T, C}, activation_dtype());  // read by proj_'s GEMMs only
  causal_attention_forward(qkv, B, T, C, H, att_, o_, attention_dropout(ctx, drop_, 0));
  const Tensor& y = proj_.forward(o_, ctx);
  return drop_.forward(y, ctx);
}

const Tensor& CausalSelfAttention::backward(const Tensor& dy, Context& ctx) {
  const Tensor& dproj_out = drop_.backward(dy, ctx);
  const Tensor& dout = proj_.backward(dproj_out, ctx);  // d o_  [B, T, C]
  const int64_t B = o_.dim(0), T = o_.dim(1), C = dim_, H = heads_;
  dqkv_.resize({B, T, 3 * C}, activation_dtype());  // qkv_ takes it in bf16
  datt_.resize({B, H, T, T}, activation_dtype());   // dS: read by GEMMs only
  BRAID_CHECK_ARG(qkv_out_ != nullptr, "attention " + name_ + ": backward before forward");
  causal_attention_backward(*qkv_out_, att_, dout, B, T, C, H, dqkv_, datt_,
                            attention_dropout(ctx, drop_, 0));
  return qkv_.backward(dqkv_, ctx);
}

void CausalSelfAttention::collect_parameters(std::vector<Parameter*>& out) {
  qkv_.collect_parameters(out);
  proj_.collect_parameters(out);
}

void CausalSelfAttention::release_activations() {
  qkv_.release_activations();
  proj_.release_activations();
  drop_.release_activations();
  att_.release();
  o_.release();
  dqkv_.release();
  datt_.release();
}

void CausalSelfAttention::set_input_grad(bool needed) {
  input_grad_ = needed;
  qkv_.set_input_grad(needed);
}

}  // namespace braid::nn
