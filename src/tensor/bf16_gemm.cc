// gemm_bf16: bf16 operands, f32 accumulate and output, on oneDNN.
//
// Why oneDNN (libdnnl, Debian 12's 2.6) and not OpenBLAS's cblas_sbgemm:
// Debian's OpenBLAS is built without BUILD_BFLOAT16, so cblas.h declares
// cblas_sbgemm but the library does not export it. oneDNN's bf16 matmul
// uses the AVX512-BF16 dot-product instructions; bench/micro/bf16_gemm.cc
// measured it on this machine (AMD EPYC, avx512_bf16, no AMX; shared and
// busy, so indicative) at GPT shapes (tokens 512–4096 × d_model 512–1024),
// one thread: 300–510 GFLOP/s, 1.9–3.1× OpenBLAS's fp32 sgemm with its
// AVX-512 kernels (150–240) and 3.6–5.8× with the AVX2 kernels this
// machine's OPENBLAS_CORETYPE=Haswell pins it to (80–127).
//
// A matmul primitive is built once per shape, transposes, leading
// dimensions, alpha and beta (the transposes are strides of the memory
// descriptors, no copies; alpha an output scale, beta a sum post-op) and
// kept in a per-thread cache: the attention's per-head GEMMs call this
// from inside OpenMP loops, and a oneDNN stream is not to be shared
// between threads. Shapes that change every step (an MoE expert's rows)
// would grow it without end, so it is emptied past kMaxCached entries.
#include "simd.h"  // first: sets vectorisation options
#include "braid/kernels.h"
#include "tensor/cpu_features.h"

#include <dnnl.hpp>

#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "braid/dtype.h"
#include "braid/error.h"
#include "braid/log.h"

namespace braid {

bool bf16_gemm_native() {
  return cpu_has_avx512_bf16();
}

namespace {

BRAID_SIMD_FN void widen_rows(const uint16_t* src, int64_t rows, int64_t cols, int64_t ld,
                              float* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* s = src + r * ld;
    float* d = dst + r * cols;
    for (int64_t c = 0; c < cols; ++c) {
      uint32_t u = uint32_t(s[c]) << 16;
      std::memcpy(d + c, &u, 4);
    }
  }
}

using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float,
                       float>;

struct DnnlThread {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  std::map<Key, std::pair<dnnl::matmul, std::vector<dnnl::memory::desc>>> cache;
};

constexpr size_t kMaxCached = 256;

DnnlThread& dnnl_thread() {
  thread_local DnnlThread t;
  return t;
}

}  // namespace

void gemm_bf16_widened(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                       const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb,
                       float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  // Stored as laid out: A is [m, k] (or [k, m] when transposed), B likewise.
  const int64_t ar = trans_a ? k : m, ac = trans_a ? m : k;
  const int64_t br = trans_b ? n : k, bc = trans_b ? k : n;
  std::vector<float> aw(size_t(ar * ac)), bw(size_t(br * bc));
  widen_rows(a, ar, ac, lda, aw.data());
  widen_rows(b, br, bc, ldb, bw.data());
  gemm(trans_a, trans_b, m, n, k, alpha, aw.data(), ac, bw.data(), bc, beta, c, ldc);
}

void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta,
               float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (!bf16_gemm_native()) {
    static std::once_flag noted;
    std::call_once(noted, [] {
      BRAID_LOG(kWarn, "bf16 GEMM: no AVX512-BF16 on this CPU; widening to f32");
    });
    gemm_bf16_widened(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  if (k == 0) {  // no products: C = beta · C
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0 ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  using dt = dnnl::memory::data_type;
  DnnlThread& t = dnnl_thread();
  const Key key{trans_a, trans_b, m, n, k, lda, ldb, ldc, alpha, beta};
  auto it = t.cache.find(key);
  if (it == t.cache.end()) {
    if (t.cache.size() >= kMaxCached) t.cache.clear();
    dnnl::memory::desc ad({m, k}, dt::bf16,
                          trans_a ? dnnl::memory::dims{1, lda} : dnnl::memory::dims{lda, 1});
    dnnl::memory::desc bd({k, n}, dt::bf16,
                          trans_b ? dnnl::memory::dims{1, ldb} : dnnl::memory::dims{ldb, 1});
    dnnl::memory::desc cd({m, n}, dt::f32, {ldc, 1});
    dnnl::primitive_attr attr;
    if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
    if (beta != 0.0f) {
      dnnl::post_ops po;
      po.append_sum(beta);
      attr.set_post_ops(po);
    }
    try {
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(ad, bd, cd), attr, t.eng);
      it = t.cache.emplace(key, std::make_pair(dnnl::matmul(pd), std::vector{ad, bd, cd})).first;
    } catch (const dnnl::error& e) {
      throw Error(Errc::kInternal, std::string("bf16 GEMM: oneDNN has no matmul for ") +
                                       std::to_string(m) + "x" + std::to_string(n) + "x" +
                                       std::to_string(k) + ": " + e.what());
    }
  }
  const auto& d = it->second.second;
  dnnl::memory am(d[0], t.eng, const_cast<uint16_t*>(a));
  dnnl::memory bm(d[1], t.eng, const_cast<uint16_t*>(b));
  dnnl::memory cm(d[2], t.eng, c);
  it->second.first.execute(t.strm,
                           {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
  t.strm.wait();
}

}  // namespace braid
