// The process's compute precision and gemm_compute: round the operands to
// it, multiply with f32 accumulate.
#include "simd.h"  // first: sets vectorisation options
#include "braid/precision.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define BRAID_X86 1
#endif

#include <atomic>
#include <vector>

#include "braid/dtype.h"
#include "braid/error.h"
#include "braid/kernels.h"
#include "tensor/cpu_features.h"

namespace braid {

namespace {
std::atomic<Precision> g_precision{Precision::kF32};
std::atomic<bool> g_bf16_activations{true};

// bf16 and f16 rounding, branch-free so the loops vectorise. NaN stays NaN
// (bf16: a quiet bit is set; f16: the pattern is kept NaN by the widen).
inline uint16_t bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
  return uint16_t(nan ? ((u >> 16) | 0x40u) : r);
}

// Copies the [rows, cols] block at src (row stride ld) to dst as bf16,
// packed (row stride cols).
BRAID_SIMD_FN void pack_bf16(const float* src, int64_t rows, int64_t cols, int64_t ld,
                             uint16_t* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = src + r * ld;
    uint16_t* d = dst + r * cols;
    for (int64_t c = 0; c < cols; ++c) d[c] = bf16_bits(s[c]);
  }
}

#ifdef BRAID_X86
// The same with AVX512-BF16's conversion instruction, 16 values at a time
// (round to nearest even as bf16_bits; it also reads f32 subnormals, below
// 1.2e-38, as zero). Used where bf16_gemm_native(), i.e. the CPU has it.
__attribute__((target("avx512f,avx512bf16"))) void pack_bf16_native(const float* src, int64_t rows,
                                                                     int64_t cols, int64_t ld,
                                                                     uint16_t* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = src + r * ld;
    uint16_t* d = dst + r * cols;
    int64_t c = 0;
    for (; c + 16 <= cols; c += 16) {
      const __m256bh b = _mm512_cvtneps_pbh(_mm512_loadu_ps(s + c));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + c), reinterpret_cast<const __m256i&>(b));
    }
    for (; c < cols; ++c) d[c] = bf16_bits(s[c]);
  }
}
#endif

void pack_f16_rounded(const float* src, int64_t rows, int64_t cols, int64_t ld, float* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = src + r * ld;
    float* d = dst + r * cols;
    for (int64_t c = 0; c < cols; ++c) d[c] = f16_to_f32(f32_to_f16(s[c]));
  }
}

#ifdef BRAID_X86
// The same with F16C's conversions, 8 values at a time (round to nearest
// even; beyond f16's range, ±inf), where the CPU has F16C.
__attribute__((target("avx,f16c"))) void pack_f16_rounded_f16c(const float* src, int64_t rows,
                                                                int64_t cols, int64_t ld,
                                                                float* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = src + r * ld;
    float* d = dst + r * cols;
    int64_t c = 0;
    for (; c + 8 <= cols; c += 8) {
      const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(s + c), _MM_FROUND_TO_NEAREST_INT);
      _mm256_storeu_ps(d + c, _mm256_cvtph_ps(h));
    }
    for (; c < cols; ++c) d[c] = f16_to_f32(f32_to_f16(s[c]));
  }
}
#endif

// Per-thread scratch for the two packed operands (grows, never shrinks).
struct Scratch {
  std::vector<uint16_t> a16, b16;
  std::vector<float> a32, b32;
  std::vector<float> wide_a, wide_b;  // bf16 operands widened (kF32, kF16)
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// Rows of work per thread below which packing stays on the caller's thread.
constexpr int64_t kParallelPack = 1 << 16;

template <class Pack, class T>
void pack(const Pack& fn, const float* src, int64_t rows, int64_t cols, int64_t ld, T* dst) {
  simd::parallel_ranges(rows * cols, kParallelPack, [&](int64_t b, int64_t e) {
    // Whole rows per range: [b, e) in elements → rows [b/cols, e/cols).
    const int64_t r0 = b / cols, r1 = e == rows * cols ? rows : e / cols;
    if (r1 > r0) fn(src + r0 * ld, r1 - r0, cols, ld, dst + r0 * cols);
  });
}

using PackBf16 = void (*)(const float*, int64_t, int64_t, int64_t, uint16_t*);
PackBf16 bf16_packer() {
#ifdef BRAID_X86
  return bf16_gemm_native() ? &pack_bf16_native : &pack_bf16;
#else
  return &pack_bf16;
#endif
}
}  // namespace

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kF32: return "fp32";
    case Precision::kBF16: return "bf16";
    case Precision::kF16: return "fp16";
  }
  return "?";
}

Precision parse_precision(const std::string& s) {
  if (s == "fp32" || s == "f32") return Precision::kF32;
  if (s == "bf16") return Precision::kBF16;
  if (s == "fp16" || s == "f16") return Precision::kF16;
  throw Error(Errc::kInvalidArgument,
              "precision '" + s + "' is not one of fp32, bf16, fp16");
}

void set_compute_precision(Precision p) { g_precision.store(p); }
Precision compute_precision() { return g_precision.load(std::memory_order_relaxed); }

void gemm_compute(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                  int64_t ldc) {
  const Precision p = compute_precision();
  if (p == Precision::kF32 || m == 0 || n == 0 || k == 0) {
    gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  const int64_t ar = trans_a ? k : m, ac = trans_a ? m : k;
  const int64_t br = trans_b ? n : k, bc = trans_b ? k : n;
  Scratch& s = scratch();
  if (p == Precision::kBF16) {
    if (s.a16.size() < size_t(ar * ac)) s.a16.resize(size_t(ar * ac));
    if (s.b16.size() < size_t(br * bc)) s.b16.resize(size_t(br * bc));
    const PackBf16 to_bf16 = bf16_packer();
    pack(to_bf16, a, ar, ac, lda, s.a16.data());
    pack(to_bf16, b, br, bc, ldb, s.b16.data());
    gemm_bf16(trans_a, trans_b, m, n, k, alpha, s.a16.data(), ac, s.b16.data(), bc, beta, c, ldc);
    return;
  }
  if (s.a32.size() < size_t(ar * ac)) s.a32.resize(size_t(ar * ac));
  if (s.b32.size() < size_t(br * bc)) s.b32.resize(size_t(br * bc));
#ifdef BRAID_X86
  const auto to_f16 = cpu_has_f16c() ? &pack_f16_rounded_f16c : &pack_f16_rounded;
#else
  const auto to_f16 = &pack_f16_rounded;
#endif
  pack(to_f16, a, ar, ac, lda, s.a32.data());
  pack(to_f16, b, br, bc, ldb, s.b32.data());
  gemm(trans_a, trans_b, m, n, k, alpha, s.a32.data(), ac, s.b32.data(), bc, beta, c, ldc);
}

namespace {

void check_operand(const GemmOperand& x, const char* which) {
  if (x.dtype != DType::kF32 && x.dtype != DType::kBF16)
    throw Error(Errc::kInvalidArgument, std::string("gemm_compute: operand ") + which + " is " +
                                            dtype_name(x.dtype) + ", not f32 or bf16");
}

// Operand x ([rows, cols] as stored) as bf16 for gemm_bf16: in place when
// it is bf16 already, else rounded into buf. Sets ld to its row stride.
const uint16_t* as_bf16(const GemmOperand& x, int64_t rows, int64_t cols,
                        std::vector<uint16_t>& buf, int64_t& ld) {
  if (x.dtype == DType::kBF16) {
    ld = x.ld;
    return static_cast<const uint16_t*>(x.data);
  }
  if (buf.size() < size_t(rows * cols)) buf.resize(size_t(rows * cols));
  pack(bf16_packer(), static_cast<const float*>(x.data), rows, cols, x.ld, buf.data());
  ld = cols;
  return buf.data();
}

// Operand x as f32: in place when f32, else widened (exactly) into buf.
const float* as_f32(const GemmOperand& x, int64_t rows, int64_t cols, std::vector<float>& buf,
                    int64_t& ld) {
  if (x.dtype == DType::kF32) {
    ld = x.ld;
    return static_cast<const float*>(x.data);
  }
  if (buf.size() < size_t(rows * cols)) buf.resize(size_t(rows * cols));
  const auto* src = static_cast<const uint16_t*>(x.data);
  for (int64_t r = 0; r < rows; ++r)
    convert_bf16_to_f32(src + r * x.ld, buf.data() + r * cols, size_t(cols));
  ld = cols;
  return buf.data();
}
}  // namespace

void gemm_compute(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  GemmOperand a, GemmOperand b, float beta, float* c, int64_t ldc) {
  check_operand(a, "A");
  check_operand(b, "B");
  const int64_t ar = trans_a ? k : m, ac = trans_a ? m : k;
  const int64_t br = trans_b ? n : k, bc = trans_b ? k : n;
  Scratch& s = scratch();
  int64_t lda = 0, ldb = 0;
  if (compute_precision() != Precision::kBF16 || m == 0 || n == 0 || k == 0 ||
      (a.dtype == DType::kF32 && b.dtype == DType::kF32)) {
    const float* af = as_f32(a, ar, ac, s.wide_a, lda);
    const float* bf = as_f32(b, br, bc, s.wide_b, ldb);
    gemm_compute(trans_a, trans_b, m, n, k, alpha, af, lda, bf, ldb, beta, c, ldc);
    return;
  }
  const uint16_t* ab = as_bf16(a, ar, ac, s.a16, lda);
  const uint16_t* bb = as_bf16(b, br, bc, s.b16, ldb);
  gemm_bf16(trans_a, trans_b, m, n, k, alpha, ab, lda, bb, ldb, beta, c, ldc);
}

DType activation_dtype() {
  return compute_precision() == Precision::kBF16 &&
                 g_bf16_activations.load(std::memory_order_relaxed)
             ? DType::kBF16
             : DType::kF32;
}
void set_bf16_activations(bool on) { g_bf16_activations.store(on); }

void round_rows_to_bf16(const float* src, int64_t rows, int64_t cols, int64_t ld, uint16_t* dst,
                        int64_t ld_dst) {
  if (rows <= 0 || cols <= 0) return;
  const PackBf16 fn = bf16_packer();
  if (ld_dst == cols) {
    pack(fn, src, rows, cols, ld, dst);
    return;
  }
  for (int64_t r = 0; r < rows; ++r) fn(src + r * ld, 1, cols, ld, dst + r * ld_dst);
}

void round_to_precision(float* x, int64_t n, Precision p) {
  if (p == Precision::kBF16) {
    for (int64_t i = 0; i < n; ++i) x[i] = bf16_to_f32(bf16_bits(x[i]));
  } else if (p == Precision::kF16) {
    for (int64_t i = 0; i < n; ++i) x[i] = f16_to_f32(f32_to_f16(x[i]));
  }
}

}  // namespace braid
