// Reduction kernels against a scalar reference, every dtype × op.
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <cstring>
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

// scale_avg finishes every avg reduction, and the collective tests' expected
// averages are computed with it: here it is held to a reference of its own.
// Floats: the quotient correctly rounded to the type (double's quotient of
// two floats, then rounded to the type, is: double has more than 2p + 2
// bits for every p here). Integers: division truncating toward zero.
TEST(Reduce, ScaleAvgMatchesAnIndependentReference) {
  std::mt19937 rng(11);
  for (int ti = 0; ti < kNumDTypes; ++ti) {
    const DType t = DType(ti);
    const size_t es = dtype_size(t);
    // Every bit pattern of the 1- and 2-byte types; random ones (and
    // edge cases) of the wider ones.
    const size_t n = es <= 2 ? size_t(1) << (8 * es) : 100000;
    std::vector<uint8_t> in(n * es);
    if (es <= 2) {
      for (size_t i = 0; i < n; ++i) std::memcpy(&in[i * es], &i, es);
    } else {
      for (auto& b : in) b = uint8_t(rng());
      if (t == DType::kF32) {
        const float edge[] = {0.0f, -0.0f, 1.0f, -3.0f, 7.0f, 1e-45f, 1.2e-38f, 3.4e38f,
                              INFINITY, -INFINITY, NAN, 16777215.0f};
        std::memcpy(in.data(), edge, sizeof edge);
      } else if (t == DType::kI32) {
        const int32_t edge[] = {0, -1, 1, -7, 7, INT32_MIN, INT32_MAX};
        std::memcpy(in.data(), edge, sizeof edge);
      } else if (t == DType::kI64) {
        const int64_t edge[] = {0, -1, 1, -7, 7, INT64_MIN, INT64_MAX};
        std::memcpy(in.data(), edge, sizeof edge);
      }
    }
    for (int d = 1; d <= 8; ++d) {
      std::vector<uint8_t> got = in;
      scale_avg(got.data(), n, t, d);
      for (size_t i = 0; i < n; ++i) {
        const uint8_t* x = &in[i * es];
        const uint8_t* y = &got[i * es];
        bool ok = false;
        switch (t) {
          case DType::kF32: {
            float a, b;
            std::memcpy(&a, x, 4);
            std::memcpy(&b, y, 4);
            const float want = float(double(a) / d);
            ok = std::isnan(want) ? std::isnan(b) : std::memcmp(&b, &want, 4) == 0;
            break;
          }
          case DType::kF64: {
            double a, b;
            std::memcpy(&a, x, 8);
            std::memcpy(&b, y, 8);
            const double want = a / d;
            ok = std::isnan(want) ? std::isnan(b) : std::memcmp(&b, &want, 8) == 0;
            break;
          }
          case DType::kF16: case DType::kBF16: {
            uint16_t a, b;
            std::memcpy(&a, x, 2);
            std::memcpy(&b, y, 2);
            const bool f16 = t == DType::kF16;
            const double q = double(f16 ? f16_to_f32(a) : bf16_to_f32(a)) / d;
            const uint16_t want = f16 ? f32_to_f16(float(q)) : f32_to_bf16(float(q));
            ok = std::isnan(q) ? std::isnan(f16 ? f16_to_f32(b) : bf16_to_f32(b)) : b == want;
            break;
          }
          case DType::kI8: ok = int8_t(*x) / d == int8_t(*y); break;
          case DType::kU8: ok = *x / d == *y; break;
          case DType::kI32: {
            int32_t a, b;
            std::memcpy(&a, x, 4);
            std::memcpy(&b, y, 4);
            ok = b == int32_t(int64_t(a) / d);
            break;
          }
          case DType::kI64: {
            int64_t a, b;
            std::memcpy(&a, x, 8);
            std::memcpy(&b, y, 8);
            ok = b == a / d;
            break;
          }
        }
        ASSERT_TRUE(ok) << dtype_name(t) << " element " << i << " / " << d;
      }
    }
  }
  // Worked values, by hand.
  float f[3] = {7.0f, -1.0f, 1.0f};
  scale_avg(f, 3, DType::kF32, 3);
  EXPECT_EQ(f[0], 7.0f / 3.0f);
  EXPECT_EQ(f[1], -1.0f / 3.0f);
  int32_t q[2] = {-7, 7};
  scale_avg(q, 2, DType::kI32, 2);
  EXPECT_EQ(q[0], -3);  // toward zero, not -4
  EXPECT_EQ(q[1], 3);
  EXPECT_THROW(scale_avg(q, 2, DType::kI32, 0), Error);
}

TEST(Dtype, HalfConversionsRoundTrip) {
  // Each format on its own: a bit pattern that is NaN in f16 is a finite
  // bf16 value (and the other way round). A NaN stays a NaN.
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = f16_to_f32(uint16_t(h));
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f)))) << "f16 " << h;
    } else {
      ASSERT_EQ(f32_to_f16(f), h) << "f16 " << h;
    }
    float g = bf16_to_f32(uint16_t(h));
    if (std::isnan(g)) {
      ASSERT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(g)))) << "bf16 " << h;
    } else {
      ASSERT_EQ(f32_to_bf16(g), h) << "bf16 " << h;
    }
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
