// Element types and reduction operators.
//
// f16 and bf16 are stored as raw 16-bit patterns; arithmetic on them is done
// in f32 (convert, operate, round to nearest even).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace braid {

enum class DType : uint8_t { kF32, kF64, kF16, kBF16, kI8, kU8, kI32, kI64 };
inline constexpr int kNumDTypes = 8;

enum class ReduceOp : uint8_t { kSum, kProd, kMin, kMax, kAvg, kBand, kBor, kBxor };
inline constexpr int kNumReduceOps = 8;

size_t dtype_size(DType t);
const char* dtype_name(DType t);        // "f32", "bf16", ...
const char* reduce_op_name(ReduceOp op);  // "sum", "avg", ...
bool dtype_is_float(DType t);
// Throws Error(kInvalidArgument) naming the unknown string.
DType parse_dtype(const std::string& s);
ReduceOp parse_reduce_op(const std::string& s);
// band/bor/bxor are defined on integer types only. Returns false otherwise.
bool reduce_op_supported(ReduceOp op, DType t);

// Scalar conversions (round to nearest even, NaN preserved).
inline float bf16_to_f32(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// One element at p (any alignment) from or to a double: floats round to
// nearest even, integers truncate toward zero and wrap to their width.
// For tests, checks and tools; not for bulk data.
void dtype_store(void* p, DType t, double v);
double dtype_load(const void* p, DType t);

// Bulk conversions (vectorised where the CPU allows).
void convert_f32_to_bf16(const float* src, uint16_t* dst, size_t n);
void convert_bf16_to_f32(const uint16_t* src, float* dst, size_t n);
void convert_f32_to_f16(const float* src, uint16_t* dst, size_t n);
void convert_f16_to_f32(const uint16_t* src, float* dst, size_t n);

}  // namespace braid
