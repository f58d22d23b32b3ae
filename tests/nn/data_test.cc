// Data: gzip decoding, Fashion-MNIST, byte text, and the sharding sampler.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <set>

#include "braid/data.h"
#include "braid/error.h"
#include "../../src/nn/gunzip.h"

using namespace braid;
using namespace braid::nn;

TEST(Sampler, ShardsReproduceTheSerialBatch) {
  for (int world : {1, 2, 3, 4, 7}) {
    std::vector<Sampler> ranks;
    for (int r = 0; r < world; ++r) ranks.emplace_back(1000, 28, 5, true, r, world);
    Sampler serial(1000, 28, 5);
    std::vector<int64_t> all, part;
    for (int64_t step : {0, 1, 34, 35, 36, 100}) {  // 35 steps per epoch: crosses epochs
      serial.global(step, all);
      std::vector<int64_t> joined;
      for (auto& s : ranks) {
        s.shard(step, part);
        joined.insert(joined.end(), part.begin(), part.end());
      }
      EXPECT_EQ(joined, all) << "world " << world << " step " << step;
    }
  }
}

TEST(Sampler, EpochIsAPermutationAndSeedMatters) {
  Sampler s(100, 10, 1), t(100, 10, 2);
  std::set<int64_t> seen;
  std::vector<int64_t> b, c;
  for (int step = 0; step < 10; ++step) {
    s.global(step, b);
    seen.insert(b.begin(), b.end());
  }
  EXPECT_EQ(seen.size(), 100u);
  s.global(0, b);
  t.global(0, c);
  EXPECT_NE(b, c);
  s.global(10, c);  // epoch 1 differs from epoch 0
  EXPECT_NE(b, c);
  EXPECT_THROW(Sampler(10, 4, 0, true, 2, 2).shard(-1, b), Error);
  EXPECT_THROW(Sampler(10, 1, 0, true, 0, 2), Error);
}

TEST(Gunzip, DecodesGzipAndRejectsDamage) {
  std::string dir = "/tmp/braid_gz_" + std::to_string(::getpid());
  std::string cmd = "mkdir -p " + dir + " && cd " + dir +
                    " && (seq 1 20000; head -c 50000 /dev/urandom | od -An -tx1) > plain.txt"
                    " && gzip -k plain.txt";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::ifstream f(dir + "/plain.txt", std::ios::binary);
  std::vector<uint8_t> plain{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  EXPECT_EQ(read_file_maybe_gz(dir + "/plain.txt.gz"), plain);
  std::ifstream g(dir + "/plain.txt.gz", std::ios::binary);
  std::vector<uint8_t> gz{std::istreambuf_iterator<char>(g), std::istreambuf_iterator<char>()};
  auto bad = gz;
  bad[gz.size() / 2] ^= 0x55;
  EXPECT_THROW(gunzip(bad, "bad"), Error);
  EXPECT_THROW(gunzip(std::vector<uint8_t>(gz.begin(), gz.begin() + std::ptrdiff_t(gz.size() / 3)), "cut"),
               Error);
  std::system(("rm -rf " + dir).c_str());
}

TEST(FashionMnist, LoadsDebianPackageOrNamesIt) {
  try {
    FashionMnist test("test");
    EXPECT_EQ(test.size(), 10000);
    Tensor x, y;
    int64_t idx[3] = {0, 1, 9999};
    test.gather(idx, 3, x, y);
    EXPECT_EQ(x.shape(), (Shape{3, 784}));
    EXPECT_EQ(y.shape(), (Shape{3}));
    EXPECT_EQ(y.i32()[0], 9);  // the first test image is an ankle boot
    float mx = -9, mn = 9;  // standardised: 0 maps to -mean/std, 255 to (1-mean)/std
    for (int i = 0; i < 784; ++i) {
      mx = std::max(mx, x.f32()[i]);
      mn = std::min(mn, x.f32()[i]);
    }
    EXPECT_NEAR(mn, -FashionMnist::kMean / FashionMnist::kStd, 1e-5);
    EXPECT_LE(mx, (1.0f - FashionMnist::kMean) / FashionMnist::kStd + 1e-5f);
    EXPECT_GT(mx, 1.0f);
  } catch (const Error& e) {
    FAIL() << "Fashion-MNIST not installed (scripts/deps.sh installs dataset-fashion-mnist): "
           << e.what();
  }
  try {
    FashionMnist missing("train", "/nonexistent");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dataset-fashion-mnist"), std::string::npos) << e.what();
  }
}

TEST(ByteText, WindowsAndTargetsAreShiftedByOne) {
  std::string s = "abcdefghij";
  ByteText t(std::vector<uint8_t>(s.begin(), s.end()), 4, "s");
  EXPECT_EQ(t.size(), 6);
  Tensor x, y;
  int64_t idx[2] = {0, 5};
  t.gather(idx, 2, x, y);
  EXPECT_EQ(x.i32()[0], 'a');
  EXPECT_EQ(y.i32()[0], 'b');
  EXPECT_EQ(x.i32()[4], 'f');
  EXPECT_EQ(y.i32()[7], 'j');
  EXPECT_THROW(ByteText(std::vector<uint8_t>(3, 'a'), 4, "short"), Error);
  ByteText def(ByteText::default_path(), 128);
  EXPECT_GT(def.size(), 10000);
}
