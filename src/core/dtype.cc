#include "braid/dtype.h"

#include "braid/error.h"

namespace braid {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: case DType::kI32: return 4;
    case DType::kF64: case DType::kI64: return 8;
    case DType::kF16: case DType::kBF16: return 2;
    case DType::kI8: case DType::kU8: return 1;
  }
  throw Error(Errc::kInvalidArgument, "unknown dtype " + std::to_string(int(t)));
}

const char* dtype_name(DType t) {
  static const char* names[] = {"f32", "f64", "f16", "bf16", "i8", "u8", "i32", "i64"};
  return unsigned(t) < 8 ? names[unsigned(t)] : "?";
}

const char* reduce_op_name(ReduceOp op) {
  static const char* names[] = {"sum", "prod", "min", "max", "avg", "band", "bor", "bxor"};
  return unsigned(op) < 8 ? names[unsigned(op)] : "?";
}

bool dtype_is_float(DType t) {
  return t == DType::kF32 || t == DType::kF64 || t == DType::kF16 || t == DType::kBF16;
}

DType parse_dtype(const std::string& s) {
  for (int i = 0; i < kNumDTypes; ++i)
    if (s == dtype_name(DType(i))) return DType(i);
  if (s == "float" || s == "float32") return DType::kF32;
  if (s == "double" || s == "float64") return DType::kF64;
  if (s == "half" || s == "float16") return DType::kF16;
  if (s == "bfloat16") return DType::kBF16;
  if (s == "int32") return DType::kI32;
  if (s == "int64") return DType::kI64;
  throw Error(Errc::kInvalidArgument,
              "unknown dtype '" + s + "' (expected f32, f64, f16, bf16, i8, u8, i32 or i64)");
}

ReduceOp parse_reduce_op(const std::string& s) {
  for (int i = 0; i < kNumReduceOps; ++i)
    if (s == reduce_op_name(ReduceOp(i))) return ReduceOp(i);
  throw Error(Errc::kInvalidArgument,
              "unknown reduce op '" + s + "' (expected sum, prod, min, max, avg, band, bor or bxor)");
}

bool reduce_op_supported(ReduceOp op, DType t) {
  if (op == ReduceOp::kBand || op == ReduceOp::kBor || op == ReduceOp::kBxor)
    return !dtype_is_float(t);
  return unsigned(op) < unsigned(kNumReduceOps);
}

void dtype_store(void* p, DType t, double v) {
  auto* q = static_cast<uint8_t*>(p);
  // integers go through int64 so that negative values wrap like a cast in C
  const int64_t i = dtype_is_float(t) ? 0 : int64_t(v);
  switch (t) {
    case DType::kF32: { float x = float(v); std::memcpy(q, &x, 4); return; }
    case DType::kF64: std::memcpy(q, &v, 8); return;
    case DType::kF16: { uint16_t h = f32_to_f16(float(v)); std::memcpy(q, &h, 2); return; }
    case DType::kBF16: { uint16_t h = f32_to_bf16(float(v)); std::memcpy(q, &h, 2); return; }
    case DType::kI8: { int8_t x = int8_t(i); std::memcpy(q, &x, 1); return; }
    case DType::kU8: { uint8_t x = uint8_t(i); std::memcpy(q, &x, 1); return; }
    case DType::kI32: { int32_t x = int32_t(i); std::memcpy(q, &x, 4); return; }
    case DType::kI64: std::memcpy(q, &i, 8); return;
  }
  throw Error(Errc::kInvalidArgument, "dtype_store: unknown dtype " + std::to_string(int(t)));
}

double dtype_load(const void* p, DType t) {
  switch (t) {
    case DType::kF32: { float f; std::memcpy(&f, p, 4); return f; }
    case DType::kF64: { double d; std::memcpy(&d, p, 8); return d; }
    case DType::kF16: { uint16_t h; std::memcpy(&h, p, 2); return f16_to_f32(h); }
    case DType::kBF16: { uint16_t h; std::memcpy(&h, p, 2); return bf16_to_f32(h); }
    case DType::kI8: { int8_t x; std::memcpy(&x, p, 1); return x; }
    case DType::kU8: { uint8_t x; std::memcpy(&x, p, 1); return x; }
    case DType::kI32: { int32_t x; std::memcpy(&x, p, 4); return x; }
    case DType::kI64: { int64_t x; std::memcpy(&x, p, 8); return double(x); }
  }
  throw Error(Errc::kInvalidArgument, "dtype_load: unknown dtype " + std::to_string(int(t)));
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t man = h & 0x3ff;
  uint32_t u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do { man <<= 1; ++e; } while (!(man & 0x400));
      u = sign | (uint32_t(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (man << 13);
  } else {
    u = sign | ((exp + 112) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000;
  uint32_t a = u & 0x7fffffff;
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00);  // NaN
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00);  // overflow → inf
  if (a < 0x38800000u) {  // subnormal or zero in f16
    if (a < 0x33000000u) return uint16_t(sign);
    uint32_t e = a >> 23;
    uint32_t m = (a & 0x7fffff) | 0x800000;
    // value = m * 2^(e-150) and an f16 subnormal is res * 2^-24
    uint32_t shift = 126 - e;
    uint32_t res = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (res & 1))) ++res;
    return uint16_t(sign | res);
  }
  uint32_t res = ((a >> 13) - (112u << 10));
  uint32_t rem = a & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (res & 1))) ++res;
  return uint16_t(sign | res);
}

void convert_f32_to_bf16(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}
void convert_bf16_to_f32(const uint16_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}
void convert_f32_to_f16(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = f32_to_f16(src[i]);
}
void convert_f16_to_f32(const uint16_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}

}  // namespace braid
