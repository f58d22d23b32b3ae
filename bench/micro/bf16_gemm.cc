// Which library should run braid's bf16 GEMMs (bf16 operands, f32
// accumulate and output)? Times, at GPT shapes (tokens × d_model → out),
// fp32 sgemm (OpenBLAS, what braid's gemm() calls), oneDNN's bf16 matmul
// primitive (libdnnl, Debian's 2.6) and OpenBLAS's cblas_sbgemm, at the
// thread count given (OMP_NUM_THREADS). Prints GFLOP/s per library.
//
//   cmake --build build --target micro_bf16_gemm
//   OMP_NUM_THREADS=1 build/bench/micro/bf16_gemm
//   OMP_NUM_THREADS=2 build/bench/micro/bf16_gemm
//
// The choice it led to (AMD EPYC with avx512_bf16, no AMX; 2 cores, shared
// machine, 2026-11-27; indicative): see
// src/tensor/bf16_gemm.cc (its top comment) and
// bench/results/2026-11-27_bf16-gemm.md.
#include <cblas.h>
#include <dnnl.hpp>

#include <dlfcn.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

namespace {

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return uint16_t(u >> 16);
}

template <class F>
double best_seconds(F&& f) {
  f();  // warm up (JIT, packing buffers)
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s < best) best = s;
  }
  return best;
}

}  // namespace

// cblas_sbgemm, looked up at run time: cblas.h declares it whatever the
// build, but only an OpenBLAS built with BUILD_BFLOAT16 exports it (Debian
// 12's does not).
using Sbgemm = void (*)(CBLAS_ORDER, CBLAS_TRANSPOSE, CBLAS_TRANSPOSE, blasint, blasint, blasint,
                        float, const uint16_t*, blasint, const uint16_t*, blasint, float, float*,
                        blasint);

int main() {
  auto sbgemm = reinterpret_cast<Sbgemm>(dlsym(RTLD_DEFAULT, "cblas_sbgemm"));
  if (!sbgemm) std::printf("cblas_sbgemm: not in this OpenBLAS (built without BUILD_BFLOAT16)\n");
  struct S {
    int64_t m, k, n;  // tokens, d_in, d_out
  };
  const S shapes[] = {{512, 512, 512},    {512, 512, 2048},   {2048, 512, 1536},
                      {2048, 512, 2048},  {2048, 2048, 512},  {4096, 1024, 1024},
                      {4096, 1024, 4096}, {1024, 1024, 3072}};
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
  std::printf("%-18s %10s %10s %10s %8s %8s\n", "m x k x n", "sgemm", "onednn", "sbgemm",
              "dnnl/s", "sb/s");
  for (const S& s : shapes) {
    std::vector<float> a(s.m * s.k), w(s.n * s.k), c(s.m * s.n);
    for (size_t i = 0; i < a.size(); ++i) a[i] = float((i * 7) % 13) * 0.01f - 0.06f;
    for (size_t i = 0; i < w.size(); ++i) w[i] = float((i * 5) % 11) * 0.01f - 0.05f;
    std::vector<uint16_t> ab(a.size()), wb(w.size());
    for (size_t i = 0; i < a.size(); ++i) ab[i] = to_bf16(a[i]);
    for (size_t i = 0; i < w.size(); ++i) wb[i] = to_bf16(w[i]);
    const double flops = 2.0 * s.m * s.n * s.k;
    // y = x Wᵀ, W [n, k] row-major (braid's Linear forward).
    double t_s = best_seconds([&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s.m, s.n, s.k, 1.0f, a.data(), s.k,
                  w.data(), s.k, 0.0f, c.data(), s.n);
    });
    using dt = dnnl::memory::data_type;
    dnnl::memory::desc ad({s.m, s.k}, dt::bf16, {s.k, 1});
    dnnl::memory::desc bd({s.k, s.n}, dt::bf16, {1, s.k});  // Wᵀ as strides
    dnnl::memory::desc cd({s.m, s.n}, dt::f32, {s.n, 1});
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(ad, bd, cd), eng);
    dnnl::matmul mm(pd);
    dnnl::memory am(ad, eng, ab.data()), bm(bd, eng, wb.data()), cm(cd, eng, c.data());
    double t_d = best_seconds([&] {
      mm.execute(strm, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
      strm.wait();
    });
    double t_b = !sbgemm ? 1e30 : best_seconds([&] {
      sbgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s.m, s.n, s.k, 1.0f, ab.data(), s.k,
             wb.data(), s.k, 0.0f, c.data(), s.n);
    });
    char name[64];
    std::snprintf(name, sizeof name, "%ldx%ldx%ld", long(s.m), long(s.k), long(s.n));
    std::printf("%-18s %10.1f %10.1f %10.1f %8.2f %8.2f\n", name, flops / t_s * 1e-9,
                flops / t_d * 1e-9, flops / t_b * 1e-9, t_s / t_d, t_s / t_b);
  }
  std::printf("GFLOP/s (best of 5); dnnl/s, sb/s: speed-up over fp32 sgemm\n");
  return 0;
}
