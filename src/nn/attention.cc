// Causal multi-head self-attention, forward and backward.
//
// Per (sample b, head h), with q, k, v the head's [T, d] slices of the qkv
// activation (row stride 3C, read in place by the GEMMs):
//   forward:  S = q kᵀ/√d;  P = softmax over j ≤ t (zeros above the diagonal);
//             o_h = P v
//   backward: dP = do_h vᵀ;  dv = Pᵀ do_h;  dS = P ⊙ (dP − rowsum(dP ⊙ P));
//             dq = dS k/√d;  dk = dSᵀ q/√d
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

namespace braid::nn {

CausalSelfAttention::CausalSelfAttention(std::string name, int64_t dim, int64_t heads,
                                         float dropout, uint64_t dropout_key)
    : Module(name),
      dim_(dim),
      heads_(heads),
      qkv_(name + ".qkv", dim, 3 * dim),
      proj_(name + ".proj", dim, dim),
      drop_(name + ".drop", dropout, dropout_key) {
  qkv_.set_gemm_only_output(true);  // q, k, v feed the attention GEMMs alone
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

// Head h of sample b in a [B, T, 3C] qkv buffer (attention_core.h): its q,
// k and v, each [T, D] with row stride 3C.
template <class F>
struct HeadQkv {
  F *q, *k, *v;
};
template <class F>
HeadQkv<F> head_qkv(F* qkv, int64_t b, int64_t h, int64_t T, int64_t C, int64_t D) {
  F* q = qkv + b * T * 3 * C + h * D;
  return {q, q + C, q + 2 * C};
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
// Element offset `off` of a qkv buffer of the given dtype as a GEMM operand
// with row stride ld.
GemmOperand operand_at(const void* base, DType dt, int64_t off, int64_t ld) {
  const auto* p = static_cast<const char*>(base) + off * int64_t(dtype_size(dt));
  return {p, dt, ld};
}
}  // namespace

void causal_attention_forward(const void* qkvp, DType qkv_dt, int64_t B, int64_t T, int64_t C,
                              int64_t H, float* att, void* o, DType o_dt) {
  const int64_t D = C / H;
  const float scale = 1.0f / std::sqrt(float(D));
  BRAID_CHECK_ARG(o_dt == DType::kF32 || o_dt == DType::kBF16,
                  std::string("attention: output dtype ") + dtype_name(o_dt));
  for_each_head(B, H, [&](int64_t b, int64_t h, int64_t bh) {
    const int64_t q = b * T * 3 * C + h * D, k = q + C, v = q + 2 * C;
    float* s = att + bh * T * T;
    // A bf16 o: the head's f32 product in this thread's scratch, then rounded.
    thread_local std::vector<float> wide;
    float* oh;
    int64_t ldo;
    if (o_dt == DType::kF32) {
      oh = static_cast<float*>(o) + b * T * C + h * D;
      ldo = C;
    } else {
      if (wide.size() < size_t(T * D)) wide.resize(size_t(T * D));
      oh = wide.data();
      ldo = D;
    }
    // Row block [i0, i1) of S needs only columns [0, i1): the causal half.
    for (int64_t i0 = 0; i0 < T; i0 += kBlock) {
      int64_t i1 = std::min(T, i0 + kBlock);
      gemm_compute(false, true, i1 - i0, i1, D, scale, operand_at(qkvp, qkv_dt, q + i0 * 3 * C, 3 * C),
                   operand_at(qkvp, qkv_dt, k, 3 * C), 0.0f, s + i0 * T, T);
    }
    softmax_causal(s, T);
    for (int64_t i0 = 0; i0 < T; i0 += kBlock) {
      int64_t i1 = std::min(T, i0 + kBlock);
      gemm_compute(false, false, i1 - i0, D, i1, 1.0f, gemm_operand(s + i0 * T, T),
                   operand_at(qkvp, qkv_dt, v, 3 * C), 0.0f, oh + i0 * ldo, ldo);
    }
    if (o_dt == DType::kBF16)
      round_rows_to_bf16(oh, T, D, D, static_cast<uint16_t*>(o) + b * T * C + h * D, C);
  });
}

void causal_attention_backward(const void* qkvp, DType qkv_dt, const float* att, const float* dop,
                               int64_t B, int64_t T, int64_t C, int64_t H, float* dqkv,
                               float* datt) {
  const int64_t D = C / H;
  const float scale = 1.0f / std::sqrt(float(D));
  for_each_head(B, H, [&](int64_t b, int64_t h, int64_t bh) {
    const int64_t q = b * T * 3 * C + h * D, k = q + C, v = q + 2 * C;
    const auto [dq, dk, dv] = head_qkv(dqkv, b, h, T, C, D);
    const float* p = att + bh * T * T;
    float* dp = datt + bh * T * T;
    const float* doh = dop + b * T * C + h * D;
    // Causal blocks only: row block [i0, i1) of dP/dS spans columns [0, i1);
    // column block [j0, j1) of P/dS is nonzero only in rows [j0, T).
    for (int64_t i0 = 0; i0 < T; i0 += kBlock) {
      int64_t i1 = std::min(T, i0 + kBlock);
      gemm_compute(false, true, i1 - i0, i1, D, 1.0f, gemm_operand(doh + i0 * C, C),
                   operand_at(qkvp, qkv_dt, v, 3 * C), 0.0f, dp + i0 * T, T);
    }
    for (int64_t j0 = 0; j0 < T; j0 += kBlock) {
      int64_t j1 = std::min(T, j0 + kBlock);
      gemm_compute(true, false, j1 - j0, D, T - j0, 1.0f, p + j0 * T + j0, T, doh + j0 * C, C, 0.0f,
                   dv + j0 * 3 * C, 3 * C);
    }
    softmax_bwd_causal(p, dp, T);
    for (int64_t i0 = 0; i0 < T; i0 += kBlock) {
      int64_t i1 = std::min(T, i0 + kBlock);
      gemm_compute(false, false, i1 - i0, D, i1, scale, gemm_operand(dp + i0 * T, T),
                   operand_at(qkvp, qkv_dt, k, 3 * C), 0.0f, dq + i0 * 3 * C, 3 * C);
    }
    for (int64_t j0 = 0; j0 < T; j0 += kBlock) {
      int64_t j1 = std::min(T, j0 + kBlock);
      gemm_compute(true, false, j1 - j0, D, T - j0, scale, gemm_operand(dp + j0 * T + j0, T),
                   operand_at(qkvp, qkv_dt, q + j0 * 3 * C, 3 * C), 0.0f, dk + j0 * 3 * C, 3 * C);
    }
  });
}

const Tensor& CausalSelfAttention::forward(const Tensor& x, Context& ctx) {
  if (x.ndim() != 3 || x.dim(2) != dim_)
    throw Error(Errc::kInvalidArgument, "attention " + name_ + ": input " + shape_str(x.shape()) +
                                            " vs expected [B, T, " + std::to_string(dim_) + "]");
  const int64_t B = x.dim(0), T = x.dim(1), C = dim_, H = heads_;
  const Tensor& qkv = qkv_.forward(x, ctx);
  qkv_out_ = &qkv;
  att_.resize({B, H, T, T}, DType::kF32);
  o_.resize({B, T, C}, activation_dtype());  // read by proj_'s GEMMs only
  causal_attention_forward(qkv.raw(), qkv.dtype(), B, T, C, H, att_.f32(), o_.raw(), o_.dtype());
  const Tensor& y = proj_.forward(o_, ctx);
  return drop_.forward(y, ctx);
}

const Tensor& CausalSelfAttention::backward(const Tensor& dy, Context& ctx) {
  const Tensor& dproj_out = drop_.backward(dy, ctx);
  const Tensor& dout = proj_.backward(dproj_out, ctx);  // d o_  [B, T, C]
  const int64_t B = o_.dim(0), T = o_.dim(1), C = dim_, H = heads_;
  dqkv_.resize({B, T, 3 * C}, DType::kF32);
  datt_.resize({B, H, T, T}, DType::kF32);
  BRAID_CHECK_ARG(qkv_out_ != nullptr, "attention " + name_ + ": backward before forward");
  causal_attention_backward(qkv_out_->raw(), qkv_out_->dtype(), att_.f32(), dout.f32(), B, T, C,
                            H, dqkv_.f32(), datt_.f32());
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
