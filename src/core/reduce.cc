// Reduction kernels. Each (dtype, op) pair is a plain loop the compiler
// vectorises; the entry points are cloned per ISA (target_clones) so one
// binary runs everywhere and uses AVX-512 where present.
#include "braid/reduce.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "braid/error.h"

// Not under ThreadSanitizer: the loader runs the clones' resolvers before
// the TSan runtime is up, and an instrumented resolver crashes at start.
#if defined(__SANITIZE_THREAD__)
#define BRAID_CLONES
#else
#define BRAID_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
#define BRAID_INLINE inline __attribute__((always_inline))

namespace braid {
namespace {

struct Sum { template <class T> BRAID_INLINE T operator()(T a, T b) const { return a + b; } };
struct Prod { template <class T> BRAID_INLINE T operator()(T a, T b) const { return a * b; } };
struct Min { template <class T> BRAID_INLINE T operator()(T a, T b) const { return b < a ? b : a; } };
struct Max { template <class T> BRAID_INLINE T operator()(T a, T b) const { return a < b ? b : a; } };
struct Band { template <class T> BRAID_INLINE T operator()(T a, T b) const { return a & b; } };
struct Bor { template <class T> BRAID_INLINE T operator()(T a, T b) const { return a | b; } };
struct Bxor { template <class T> BRAID_INLINE T operator()(T a, T b) const { return a ^ b; } };

// Storage type S, compute type C, conversions in and out.
template <class S> struct Plain {
  using C = S;
  static BRAID_INLINE C in(S v) { return v; }
  static BRAID_INLINE S out(C v) { return v; }
};
struct BF16 {
  using C = float;
  static BRAID_INLINE float in(uint16_t v) { return bf16_to_f32(v); }
  static BRAID_INLINE uint16_t out(float v) { return f32_to_bf16(v); }
};
struct F16 {
  using C = float;
  static BRAID_INLINE float in(uint16_t v) { return f16_to_f32(v); }
  static BRAID_INLINE uint16_t out(float v) { return f32_to_f16(v); }
};

template <class S, class Cv, class Op>
BRAID_INLINE void loop2(S* d, const S* a, const S* b, size_t n, Op op) {
  for (size_t i = 0; i < n; ++i) d[i] = Cv::out(op(Cv::in(a[i]), Cv::in(b[i])));
}

// Blocked so the f32 accumulator stays in L1 while sources stream through.
template <class S, class Cv, class Op>
BRAID_INLINE void loop_many(S* d, const S* const* src, int k, size_t n, Op op) {
  using C = typename Cv::C;
  constexpr size_t kBlock = 1024;
  C acc[kBlock];
  for (size_t base = 0; base < n; base += kBlock) {
    size_t m = std::min(kBlock, n - base);
    const S* s0 = src[0] + base;
    for (size_t i = 0; i < m; ++i) acc[i] = Cv::in(s0[i]);
    for (int j = 1; j < k; ++j) {
      const S* sj = src[j] + base;
      for (size_t i = 0; i < m; ++i) acc[i] = op(acc[i], Cv::in(sj[i]));
    }
    S* dd = d + base;
    for (size_t i = 0; i < m; ++i) dd[i] = Cv::out(acc[i]);
  }
}

// Calls run(f) with the functor f of `op`; bitwise ops only where the
// compute type is an integer. Both loop shapes dispatch through this one
// table; everything is inlined into each ISA clone of the entry points.
template <class Cv, class Run>
BRAID_INLINE void with_op(ReduceOp op, const Run& run) {
  switch (op) {
    case ReduceOp::kSum: case ReduceOp::kAvg: return run(Sum{});
    case ReduceOp::kProd: return run(Prod{});
    case ReduceOp::kMin: return run(Min{});
    case ReduceOp::kMax: return run(Max{});
    default: break;
  }
  if constexpr (std::is_integral_v<typename Cv::C>) {
    switch (op) {
      case ReduceOp::kBand: return run(Band{});
      case ReduceOp::kBor: return run(Bor{});
      case ReduceOp::kBxor: return run(Bxor{});
      default: break;
    }
  }
}

template <class S, class Cv>
BRAID_INLINE void dispatch2(void* d, const void* a, const void* b, size_t n, ReduceOp op) {
  auto D = static_cast<S*>(d);
  auto A = static_cast<const S*>(a);
  auto B = static_cast<const S*>(b);
  with_op<Cv>(op, [&](auto f) __attribute__((always_inline)) { loop2<S, Cv>(D, A, B, n, f); });
}

template <class S, class Cv>
BRAID_INLINE void dispatch_many(void* d, const void* const* s, int k, size_t n, ReduceOp op) {
  auto D = static_cast<S*>(d);
  auto Sv = reinterpret_cast<const S* const*>(s);
  with_op<Cv>(op, [&](auto f) __attribute__((always_inline)) { loop_many<S, Cv>(D, Sv, k, n, f); });
}

#define BRAID_KERNELS(NAME, S, CV)                                                    \
  BRAID_CLONES void k2_##NAME(void* d, const void* a, const void* b, size_t n,       \
                              ReduceOp op) {                                          \
    dispatch2<S, CV>(d, a, b, n, op);                                                 \
  }                                                                                   \
  BRAID_CLONES void kmany_##NAME(void* d, const void* const* s, int k, size_t n,     \
                                 ReduceOp op) {                                       \
    dispatch_many<S, CV>(d, s, k, n, op);                                             \
  }

BRAID_KERNELS(f32, float, Plain<float>)
BRAID_KERNELS(f64, double, Plain<double>)
BRAID_KERNELS(bf16, uint16_t, BF16)
BRAID_KERNELS(f16, uint16_t, F16)
BRAID_KERNELS(i8, int8_t, Plain<int8_t>)
BRAID_KERNELS(u8, uint8_t, Plain<uint8_t>)
BRAID_KERNELS(i32, int32_t, Plain<int32_t>)
BRAID_KERNELS(i64, int64_t, Plain<int64_t>)

void check(DType t, ReduceOp op) {
  if (unsigned(t) >= unsigned(kNumDTypes))
    throw Error(Errc::kInvalidArgument, "unknown dtype " + std::to_string(int(t)));
  if (unsigned(op) >= unsigned(kNumReduceOps))
    throw Error(Errc::kInvalidArgument, "unknown reduce op " + std::to_string(int(op)));
  if (!reduce_op_supported(op, t))
    throw Error(Errc::kInvalidArgument, std::string("reduce op ") + reduce_op_name(op) +
                                            " is not defined for dtype " + dtype_name(t) +
                                            " (bitwise ops need an integer dtype)");
}

}  // namespace

void reduce2(void* dst, const void* a, const void* b, size_t n, DType t, ReduceOp op) {
  check(t, op);
  if (n == 0) return;
  switch (t) {
    case DType::kF32: return k2_f32(dst, a, b, n, op);
    case DType::kF64: return k2_f64(dst, a, b, n, op);
    case DType::kBF16: return k2_bf16(dst, a, b, n, op);
    case DType::kF16: return k2_f16(dst, a, b, n, op);
    case DType::kI8: return k2_i8(dst, a, b, n, op);
    case DType::kU8: return k2_u8(dst, a, b, n, op);
    case DType::kI32: return k2_i32(dst, a, b, n, op);
    case DType::kI64: return k2_i64(dst, a, b, n, op);
  }
}

void reduce_many(void* dst, const void* const* s, int k, size_t n, DType t, ReduceOp op) {
  check(t, op);
  if (n == 0 || k <= 0) return;
  switch (t) {
    case DType::kF32: return kmany_f32(dst, s, k, n, op);
    case DType::kF64: return kmany_f64(dst, s, k, n, op);
    case DType::kBF16: return kmany_bf16(dst, s, k, n, op);
    case DType::kF16: return kmany_f16(dst, s, k, n, op);
    case DType::kI8: return kmany_i8(dst, s, k, n, op);
    case DType::kU8: return kmany_u8(dst, s, k, n, op);
    case DType::kI32: return kmany_i32(dst, s, k, n, op);
    case DType::kI64: return kmany_i64(dst, s, k, n, op);
  }
}

namespace {
template <class T> void div_int(void* buf, size_t n, int d) {
  T* p = static_cast<T*>(buf);
  for (size_t i = 0; i < n; ++i) p[i] = T(p[i] / d);
}
}  // namespace

void scale_avg(void* buf, size_t n, DType t, int divisor) {
  BRAID_CHECK_ARG(divisor > 0, "scale_avg: divisor must be positive");
  switch (t) {
    case DType::kF32: {
      float* p = static_cast<float*>(buf);
      float inv = 1.0f / float(divisor);
      // Multiply when exact (power of two) so results match a division.
      bool pow2 = (divisor & (divisor - 1)) == 0;
      if (pow2) for (size_t i = 0; i < n; ++i) p[i] *= inv;
      else for (size_t i = 0; i < n; ++i) p[i] /= float(divisor);
      return;
    }
    case DType::kF64: {
      double* p = static_cast<double*>(buf);
      for (size_t i = 0; i < n; ++i) p[i] /= double(divisor);
      return;
    }
    case DType::kBF16: {
      uint16_t* p = static_cast<uint16_t*>(buf);
      for (size_t i = 0; i < n; ++i) p[i] = f32_to_bf16(bf16_to_f32(p[i]) / float(divisor));
      return;
    }
    case DType::kF16: {
      uint16_t* p = static_cast<uint16_t*>(buf);
      for (size_t i = 0; i < n; ++i) p[i] = f32_to_f16(f16_to_f32(p[i]) / float(divisor));
      return;
    }
    case DType::kI8: return div_int<int8_t>(buf, n, divisor);
    case DType::kU8: return div_int<uint8_t>(buf, n, divisor);
    case DType::kI32: return div_int<int32_t>(buf, n, divisor);
    case DType::kI64: return div_int<int64_t>(buf, n, divisor);
  }
}

namespace {
template <class T> void ident(void* out, ReduceOp op) {
  T v{};
  switch (op) {
    case ReduceOp::kSum: case ReduceOp::kAvg: case ReduceOp::kBor: case ReduceOp::kBxor:
      v = T(0); break;
    case ReduceOp::kProd: v = T(1); break;
    case ReduceOp::kMin: v = std::numeric_limits<T>::has_infinity
                                 ? std::numeric_limits<T>::infinity()
                                 : std::numeric_limits<T>::max(); break;
    case ReduceOp::kMax: v = std::numeric_limits<T>::has_infinity
                                 ? -std::numeric_limits<T>::infinity()
                                 : std::numeric_limits<T>::lowest(); break;
    case ReduceOp::kBand:
      if constexpr (std::is_integral_v<T>) v = T(~T(0));
      break;
  }
  std::memcpy(out, &v, sizeof(T));
}
}  // namespace

void reduce_identity(void* out, DType t, ReduceOp op) {
  check(t, op);
  switch (t) {
    case DType::kF32: return ident<float>(out, op);
    case DType::kF64: return ident<double>(out, op);
    case DType::kBF16: { float f; ident<float>(&f, op); uint16_t h = f32_to_bf16(f); std::memcpy(out, &h, 2); return; }
    case DType::kF16: { float f; ident<float>(&f, op); uint16_t h = f32_to_f16(f); std::memcpy(out, &h, 2); return; }
    case DType::kI8: return ident<int8_t>(out, op);
    case DType::kU8: return ident<uint8_t>(out, op);
    case DType::kI32: return ident<int32_t>(out, op);
    case DType::kI64: return ident<int64_t>(out, op);
  }
}

}  // namespace braid
