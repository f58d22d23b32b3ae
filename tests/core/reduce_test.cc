// Reduction kernels against a scalar reference, every dtype × op.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "braid/error.h"
#include "braid/reduce.h"

using namespace braid;

namespace {

double load(const std::vector<uint8_t>& b, size_t i, DType t) {
  const uint8_t* p = b.data() + i * dtype_size(t);
  switch (t) {
    case DType::kF32: return *reinterpret_cast<const float*>(p);
    case DType::kF64: return *reinterpret_cast<const double*>(p);
    case DType::kF16: return f16_to_f32(*reinterpret_cast<const uint16_t*>(p));
    case DType::kBF16: return bf16_to_f32(*reinterpret_cast<const uint16_t*>(p));
    case DType::kI8: return *reinterpret_cast<const int8_t*>(p);
    case DType::kU8: return *reinterpret_cast<const uint8_t*>(p);
    case DType::kI32: return *reinterpret_cast<const int32_t*>(p);
    case DType::kI64: return double(*reinterpret_cast<const int64_t*>(p));
  }
  return 0;
}

void store(std::vector<uint8_t>& b, size_t i, DType t, double v) {
  uint8_t* p = b.data() + i * dtype_size(t);
  switch (t) {
    case DType::kF32: *reinterpret_cast<float*>(p) = float(v); break;
    case DType::kF64: *reinterpret_cast<double*>(p) = v; break;
    case DType::kF16: *reinterpret_cast<uint16_t*>(p) = f32_to_f16(float(v)); break;
    case DType::kBF16: *reinterpret_cast<uint16_t*>(p) = f32_to_bf16(float(v)); break;
    case DType::kI8: *reinterpret_cast<int8_t*>(p) = int8_t(v); break;
    case DType::kU8: *reinterpret_cast<uint8_t*>(p) = uint8_t(v); break;
    case DType::kI32: *reinterpret_cast<int32_t*>(p) = int32_t(v); break;
    case DType::kI64: *reinterpret_cast<int64_t*>(p) = int64_t(v); break;
  }
}

int64_t as_int(double v) { return int64_t(v); }

double ref(double a, double b, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: case ReduceOp::kAvg: return a + b;
    case ReduceOp::kProd: return a * b;
    case ReduceOp::kMin: return std::min(a, b);
    case ReduceOp::kMax: return std::max(a, b);
    case ReduceOp::kBand: return double(as_int(a) & as_int(b));
    case ReduceOp::kBor: return double(as_int(a) | as_int(b));
    case ReduceOp::kBxor: return double(as_int(a) ^ as_int(b));
  }
  return 0;
}

}  // namespace

TEST(Reduce, EveryDtypeAndOpMatchesScalarReference) {
  std::mt19937 rng(7);
  for (int ti = 0; ti < kNumDTypes; ++ti) {
    DType t = DType(ti);
    for (int oi = 0; oi < kNumReduceOps; ++oi) {
      ReduceOp op = ReduceOp(oi);
      if (!reduce_op_supported(op, t)) {
        std::vector<uint8_t> a(16);
        EXPECT_THROW(reduce2(a.data(), a.data(), a.data(), 1, t, op), Error);
        continue;
      }
      for (size_t n : {size_t(0), size_t(1), size_t(7), size_t(1000), size_t(4099)}) {
        std::vector<uint8_t> a(n * dtype_size(t)), b(a.size()), c(a.size());
        for (size_t i = 0; i < n; ++i) {
          // small values keep products and sums exact in every type
          store(a, i, t, double(int(rng() % 7) - (t == DType::kU8 ? 0 : 3)));
          store(b, i, t, double(int(rng() % 7) - (t == DType::kU8 ? 0 : 3)));
        }
        reduce2(c.data(), a.data(), b.data(), n, t, op);
        for (size_t i = 0; i < n; ++i) {
          double want = ref(load(a, i, t), load(b, i, t), op);
          std::vector<uint8_t> w(dtype_size(t));
          store(w, 0, t, want);
          ASSERT_EQ(load(c, i, t), load(w, 0, t))
              << dtype_name(t) << " " << reduce_op_name(op) << " n=" << n << " i=" << i;
        }
        // reduce_many over 3 sources equals two reduce2 calls
        const void* srcs[3] = {a.data(), b.data(), a.data()};
        std::vector<uint8_t> m(a.size()), r(a.size());
        reduce_many(m.data(), srcs, 3, n, t, op);
        reduce2(r.data(), a.data(), b.data(), n, t, op);
        reduce2(r.data(), r.data(), a.data(), n, t, op);
        if (t != DType::kF16 && t != DType::kBF16) {
          ASSERT_EQ(m, r) << dtype_name(t) << " " << reduce_op_name(op);
        }
      }
    }
  }
}

TEST(Reduce, HalfTypesAccumulateInF32) {
  // 1 + 2^-9 * 4 in bf16 is lost step by step but not when accumulated in f32.
  const size_t n = 1;
  uint16_t one = f32_to_bf16(1.0f), tiny = f32_to_bf16(1.0f / 512);
  std::vector<uint16_t> srcs_v = {one, tiny, tiny, tiny, tiny};
  const void* srcs[5];
  for (int i = 0; i < 5; ++i) srcs[i] = &srcs_v[i];
  uint16_t out;
  reduce_many(&out, srcs, 5, n, DType::kBF16, ReduceOp::kSum);
  EXPECT_EQ(bf16_to_f32(out), 1.0f + 4.0f / 512);
}

TEST(Dtype, HalfConversionsRoundTrip) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = f16_to_f32(uint16_t(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_f16(f), h) << h;
    float g = bf16_to_f32(uint16_t(h));
    if (std::isnan(g)) continue;
    ASSERT_EQ(f32_to_bf16(g), h) << h;
  }
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);
  EXPECT_EQ(f32_to_bf16(1.0f + 1.0f / 256), f32_to_bf16(1.0f));  // ties to even
}

TEST(Dtype, ParseNamesAndRejectUnknown) {
  EXPECT_EQ(parse_dtype("bf16"), DType::kBF16);
  EXPECT_EQ(parse_reduce_op("bxor"), ReduceOp::kBxor);
  try {
    parse_dtype("f8");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("f8"), std::string::npos);
  }
}

TEST(Dtype, StoreAndLoadOneElement) {
  uint8_t buf[9] = {};
  for (int ti = 0; ti < braid::kNumDTypes; ++ti) {
    auto t = braid::DType(ti);
    for (double v : {0.0, 1.0, -2.0, 100.0}) {
      if (t == braid::DType::kU8 && v < 0) continue;
      braid::dtype_store(buf + 1, t, v);  // unaligned on purpose
      EXPECT_EQ(braid::dtype_load(buf + 1, t), v) << braid::dtype_name(t);
    }
  }
  braid::dtype_store(buf, braid::DType::kI8, 200);  // wraps like a cast
  EXPECT_EQ(braid::dtype_load(buf, braid::DType::kI8), -56);
  braid::dtype_store(buf, braid::DType::kU8, -1);
  EXPECT_EQ(braid::dtype_load(buf, braid::DType::kU8), 255);
  braid::dtype_store(buf, braid::DType::kBF16, 1.0 / 3);  // rounded to bf16
  EXPECT_EQ(braid::dtype_load(buf, braid::DType::kBF16), braid::bf16_to_f32(braid::f32_to_bf16(1.0f / 3)));
  EXPECT_THROW(braid::dtype_store(buf, braid::DType(99), 1), braid::Error);
}
