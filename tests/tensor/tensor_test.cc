// Tensor: ownership, views, buffer reuse, bf16 conversion, shape errors.
#include "braid/tensor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "braid/error.h"
#include "braid/kernels.h"

using namespace braid;

TEST(Tensor, OwningZeroedAndShape) {
  Tensor t({2, 3, 4});
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.dim(-1), 4);
  EXPECT_TRUE(t.owning());
  for (int i = 0; i < 24; ++i) EXPECT_EQ(t.f32()[i], 0.0f);
}

TEST(Tensor, ViewDoesNotOwnAndCopyIsDeep) {
  float buf[6] = {1, 2, 3, 4, 5, 6};
  Tensor v = Tensor::view(buf, {2, 3});
  EXPECT_FALSE(v.owning());
  v.f32()[0] = 9;
  EXPECT_EQ(buf[0], 9);
  Tensor c = v;
  c.f32()[1] = 7;
  EXPECT_EQ(buf[1], 2);
  EXPECT_THROW(v.resize({4, 4}), Error);
}

TEST(Tensor, ResizeReusesCapacity) {
  Tensor t({16, 16});
  const void* p = t.raw();
  t.resize({8, 8});
  EXPECT_EQ(t.raw(), p);
  t.resize({16, 16});
  EXPECT_EQ(t.raw(), p);
}

TEST(Tensor, Bf16RoundTrip) {
  Tensor t({5});
  float vals[5] = {1.0f, -2.5f, 3.14159f, 1e-3f, 65504.0f};
  for (int i = 0; i < 5; ++i) t.f32()[i] = vals[i];
  Tensor b = t.to(DType::kBF16);
  EXPECT_EQ(b.dtype(), DType::kBF16);
  Tensor back = b.to(DType::kF32);
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(back.f32()[i], vals[i], std::fabs(vals[i]) * 4e-3);
  EXPECT_EQ(back.f32()[0], 1.0f);
}

TEST(Tensor, ShapeErrorsNameBothShapes) {
  Tensor a({2, 3}), b({3, 2});
  try {
    check_same_shape(a, b, "add");
    FAIL();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("[2, 3]"), std::string::npos) << m;
    EXPECT_NE(m.find("[3, 2]"), std::string::npos) << m;
  }
  try {
    a.check_shape({-1, 4}, "linear");
    FAIL();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("[2, 3]"), std::string::npos) << m;
    EXPECT_NE(m.find("[*, 4]"), std::string::npos) << m;
  }
  EXPECT_THROW(a.i32(), Error);
  EXPECT_THROW(a.reshape({5}), Error);
}

TEST(Kernels, GemmTransposesMatchReference) {
  // C = op(A) op(B) for all four transpose combinations, 3x4 · 4x2.
  float A[12], B[8];
  for (int i = 0; i < 12; ++i) A[i] = float(i + 1);
  for (int i = 0; i < 8; ++i) B[i] = float(i % 3) - 1.0f;
  float ref[6] = {};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j)
      for (int k = 0; k < 4; ++k) ref[i * 2 + j] += A[i * 4 + k] * B[k * 2 + j];
  float At[12], Bt[8];
  for (int i = 0; i < 3; ++i)
    for (int k = 0; k < 4; ++k) At[k * 3 + i] = A[i * 4 + k];
  for (int k = 0; k < 4; ++k)
    for (int j = 0; j < 2; ++j) Bt[j * 4 + k] = B[k * 2 + j];
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      float C[6] = {};
      gemm(ta, tb, 3, 2, 4, 1.0f, ta ? At : A, ta ? 3 : 4, tb ? Bt : B, tb ? 4 : 2, 0.0f, C, 2);
      for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(C[i], ref[i]) << ta << tb;
    }
}

TEST(Kernels, ExpApproxAccurate) {
  std::vector<float> x, y(2001);
  for (int i = 0; i <= 2000; ++i) x.push_back(-80.0f + 0.084f * float(i));
  vexp(x.data(), y.data(), int64_t(x.size()));
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_NEAR(y[i], std::exp(x[i]), 3e-7 * std::exp(x[i])) << x[i];
}

TEST(Kernels, ThreadCountIsSettable) {
  set_num_threads(2);
  EXPECT_EQ(num_threads(), 2);
  set_num_threads(1);
  EXPECT_EQ(num_threads(), 1);
  EXPECT_THROW(set_num_threads(0), Error);
}

// The storage counter sees a tensor's buffer come and go, and its peak
// holds the most there was until reset.
TEST(TensorBytes, InUseAndPeakFollowAllocationsAndReleases) {
  const size_t before = braid::tensor_bytes_in_use();
  braid::reset_tensor_peak_bytes();
  {
    braid::Tensor a({1024, 256});  // 1 MiB of f32
    EXPECT_GE(braid::tensor_bytes_in_use(), before + (1u << 20));
    braid::Tensor b = a;  // a deep copy: another MiB
    EXPECT_GE(braid::tensor_bytes_in_use(), before + (2u << 20));
    b.release();
    EXPECT_LT(braid::tensor_bytes_in_use(), before + (2u << 20));
  }
  EXPECT_EQ(braid::tensor_bytes_in_use(), before);
  EXPECT_GE(braid::tensor_peak_bytes(), before + (2u << 20));
  braid::reset_tensor_peak_bytes();
  EXPECT_EQ(braid::tensor_peak_bytes(), before);
}

// A freed large buffer is kept for the next tensor of its size, which
// still starts zeroed (the same block: its pages stay mapped); what is
// cached and what is in use never exceed the peak, so a reset peak sends
// the cache back; sanitizer builds keep nothing.
TEST(TensorBytes, FreedBuffersServeTheNextOfTheirSizeZeroedWithinThePeak) {
  braid::reset_tensor_peak_bytes();
  const size_t base = braid::tensor_bytes_in_use() + braid::tensor_cached_bytes();
  void* first = nullptr;
  {
    braid::Tensor a({1024, 256});  // 1 MiB
    first = a.raw();
    a.fill(3.0f);
  }
  const bool caches = braid::tensor_cached_bytes() > 0;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  EXPECT_FALSE(caches);
#else
  const char* off = std::getenv("BRAID_TENSOR_CACHE");
  EXPECT_EQ(caches, off == nullptr || std::string(off) != "0");
#endif
  EXPECT_LE(braid::tensor_bytes_in_use() + braid::tensor_cached_bytes(),
            std::max(braid::tensor_peak_bytes(), base));
  {
    const size_t cached = braid::tensor_cached_bytes();
    braid::Tensor b({256, 1024});  // the same bytes, another shape: a cached block
    if (caches) {
      EXPECT_LT(braid::tensor_cached_bytes(), cached);
    }
    for (int64_t i = 0; i < b.numel(); ++i) ASSERT_EQ(b.f32()[i], 0.0f) << i;
    braid::Tensor c({512, 256});  // another size: a block of its own
    EXPECT_NE(c.raw(), first);
    EXPECT_NE(c.raw(), b.raw());
  }
  // The peak drops to what is in use: the cache gives its blocks back at
  // the next allocation it cannot serve.
  braid::reset_tensor_peak_bytes();
  braid::Tensor d({2048, 256});  // 2 MiB: not cached
  EXPECT_LE(braid::tensor_bytes_in_use() + braid::tensor_cached_bytes(),
            braid::tensor_peak_bytes());
}
