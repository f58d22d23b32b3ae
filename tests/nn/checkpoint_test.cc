// Checkpoints: bitwise round trip of model + optimizer + step, resume gives
// the same trajectory, and every kind of damage is a clear kCorrupt error.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include "braid/checkpoint.h"
#include "braid/error.h"
#include "braid/models.h"
#include "braid/trainer.h"

using namespace braid;
using namespace braid::nn;

namespace {
std::string tmp(const std::string& name) {
  return "/tmp/braid_ck_" + std::to_string(::getpid()) + "_" + name;
}

std::vector<uint8_t> slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}
void spit(const std::string& p, const std::vector<uint8_t>& b) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

ByteText tiny_text() {
  std::string s;
  for (int i = 0; i < 400; ++i) s += "the quick brown fox " + std::to_string(i % 17) + "\n";
  return ByteText(std::vector<uint8_t>(s.begin(), s.end()), 8, "tiny");
}

GptConfig tiny_gpt() {
  GptConfig c;
  c.context = 8;
  c.layers = 1;
  c.dim = 16;
  c.heads = 2;
  return c;
}
}  // namespace

TEST(Checkpoint, RoundTripIsBitwise) {
  Checkpoint ck;
  Tensor a({3, 5}), b({7}, DType::kI32), c({4}, DType::kBF16);
  for (int i = 0; i < 15; ++i) a.f32()[i] = float(i) * 0.37f - 2.0f;
  for (int i = 0; i < 7; ++i) b.i32()[i] = i * 1000 - 3;
  for (int i = 0; i < 4; ++i) c.bf16()[i] = uint16_t(0x3f80 + i);
  ck.tensors.emplace("a", a);
  ck.tensors.emplace("b", b);
  ck.tensors.emplace("c", c);
  ck.tensors.emplace("empty", Tensor({0}));
  ck.meta["step"] = "42";
  std::string p = tmp("rt");
  save_checkpoint(p, ck);
  Checkpoint r = load_checkpoint(p);
  EXPECT_EQ(r.meta.at("step"), "42");
  ASSERT_EQ(r.tensors.size(), 4u);
  for (const auto& [name, t] : ck.tensors) {
    const Tensor& u = r.tensors.at(name);
    EXPECT_EQ(u.shape(), t.shape()) << name;
    EXPECT_EQ(u.dtype(), t.dtype()) << name;
    EXPECT_EQ(std::memcmp(u.raw(), t.raw(), t.nbytes()), 0) << name;
  }
  ::unlink(p.c_str());
}

TEST(Checkpoint, ResumeContinuesBitwiseIdentically) {
  ByteText data = tiny_text();
  TrainOptions o;
  o.global_batch = 4;
  o.seed = 3;
  LrSchedule s;
  s.base = 1e-2f;
  // Run A: 6 steps straight.
  auto ma = make_gpt(tiny_gpt(), 1);
  AdamW oa;
  Trainer ta(*ma, data, oa, s, o);
  for (int i = 0; i < 6; ++i) ta.step();
  // Run B: 3 steps, save, fresh objects, load, 3 more.
  std::string p = tmp("resume");
  {
    auto mb = make_gpt(tiny_gpt(), 1);
    AdamW ob;
    Trainer tb(*mb, data, ob, s, o);
    for (int i = 0; i < 3; ++i) tb.step();
    tb.save(p);
  }
  auto mc = make_gpt(tiny_gpt(), 99);  // different init: the checkpoint must overwrite it
  AdamW oc;
  Trainer tc(*mc, data, oc, s, o);
  tc.load(p);
  EXPECT_EQ(tc.next_step(), 3);
  for (int i = 0; i < 3; ++i) tc.step();
  auto pa = ma->parameters(), pc = mc->parameters();
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_EQ(std::memcmp(pa[i]->data.raw(), pc[i]->data.raw(), pa[i]->data.nbytes()), 0)
        << pa[i]->name;
  ::unlink(p.c_str());
}

TEST(Checkpoint, TruncatedAndCorruptedFilesGiveClearErrors) {
  auto m = make_mlp({6, 5, 3}, 1);
  Checkpoint ck;
  add_parameters(ck, m->parameters());
  std::string p = tmp("good"), q = tmp("bad");
  save_checkpoint(p, ck);
  std::vector<uint8_t> good = slurp(p);
  auto expect_corrupt = [&](const std::vector<uint8_t>& bytes, const char* what) {
    spit(q, bytes);
    try {
      load_checkpoint(q);
      ADD_FAILURE() << what << ": loaded without error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::kCorrupt) << what << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(q), std::string::npos) << e.what();
    }
  };
  // Truncated at many lengths, including inside header and payload.
  for (size_t n : {size_t(0), size_t(5), size_t(12), size_t(30), good.size() / 2, good.size() - 1})
    expect_corrupt(std::vector<uint8_t>(good.begin(), good.begin() + std::ptrdiff_t(n)),
                   "truncated");
  // A flipped bit anywhere is caught by the CRC.
  for (size_t at : {size_t(3), size_t(20), good.size() / 2, good.size() - 20}) {
    auto b = good;
    b[at] ^= 0x10;
    expect_corrupt(b, "bit flip");
  }
  // Garbage of the right shape.
  expect_corrupt(std::vector<uint8_t>(good.size(), 0xab), "garbage");
  // Missing file is kIo.
  try {
    load_checkpoint(tmp("does_not_exist"));
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kIo);
  }
  // Loading into a model of another shape names the tensor.
  auto other = make_mlp({6, 4, 3}, 1);
  try {
    load_parameters(load_checkpoint(p), other->parameters());
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fc1.weight"), std::string::npos) << e.what();
  }
  ::unlink(p.c_str());
  ::unlink(q.c_str());
}

TEST(Checkpoint, SaveIsAtomicNoTempFileLeft) {
  Checkpoint ck;
  ck.tensors.emplace("x", Tensor({100}));
  std::string p = tmp("atomic");
  save_checkpoint(p, ck);
  save_checkpoint(p, ck);  // overwrite
  EXPECT_NE(::access(p.c_str(), F_OK), -1);
  std::string t = p + ".tmp." + std::to_string(::getpid());
  EXPECT_EQ(::access(t.c_str(), F_OK), -1);
  EXPECT_THROW(save_checkpoint("/nonexistent_dir/x.ckpt", ck), Error);
  ::unlink(p.c_str());
}

TEST(Checkpoint, Crc32MatchesZlib) {
  const char* s = "123456789";
  EXPECT_EQ(crc32(s, 9), 0xCBF43926u);
  EXPECT_EQ(crc32(s + 4, 5, crc32(s, 4)), 0xCBF43926u);
}
