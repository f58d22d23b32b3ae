// The tensor-parallel GPT trains as the serial GPT does (parallelize over
// gpt_spec at one pipeline stage, ParallelTrainer): 10 AdamW steps
// with dropout and clipping, every step's loss and the final parameters
// (shards gathered) within 1e-5 relative of nn::Trainer on nn::make_gpt
// with the same seed and batches. tp = 2 (plain and sequence parallel) in
// one 2-process job; tp = 4 (plain and sequence parallel) and dp = 2 × tp
// = 2 through a Mesh in one 4-process job. Plus: initial shards are exact
// slices of the serial parameters, and sizes that do not divide are
// refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "braid/comm.h"
#include "braid/data.h"
#include "braid/kernels.h"
#include "braid/mesh.h"
#include "braid/models.h"
#include "braid/parallelize.h"
#include "braid/tensor_parallel.h"
#include "braid/trainer.h"
#include "support/multiproc.h"

namespace braid::parallel::tp {
namespace {

constexpr int kSteps = 10;

std::vector<uint8_t> text_bytes() {
  std::string s;
  const char* words[] = {"the ", "quick ", "brown ", "fox ", "jumps ", "over ", "a ", "lazy ",
                         "dog. ", "braid ", "splits ", "tensors "};
  for (int i = 0; i < 600; ++i) s += words[(i * 7 + i / 3) % 12];
  return std::vector<uint8_t>(s.begin(), s.end());
}

nn::GptConfig config() {
  nn::GptConfig c;
  c.context = 8;
  c.layers = 2;
  c.dim = 16;
  c.heads = 4;
  c.dropout = 0.1f;
  return c;
}

nn::TrainOptions train_options() {
  nn::TrainOptions o;
  o.global_batch = 8;
  o.seed = 11;
  o.clip = 0.5;
  return o;
}

nn::LrSchedule schedule() {
  nn::LrSchedule s;
  s.base = 3e-3f;
  s.warmup = 3;
  return s;
}

// eps 1e-6: see data_parallel_test (the key bias has an exactly zero
// gradient whose rounding noise a tiny eps would turn into full steps).
nn::AdamW optimizer() { return nn::AdamW(0.9f, 0.999f, 1e-6f, 0.01f); }

struct Trace {
  std::vector<double> losses;
  std::map<std::string, std::vector<float>> params;
};

const Trace& serial() {
  static Trace t = [] {
    set_num_threads(1);
    Trace r;
    auto model = nn::make_gpt(config(), 5);
    nn::ByteText data(text_bytes(), 8, "tp test text");
    nn::AdamW opt = optimizer();
    nn::Trainer tr(*model, data, opt, schedule(), train_options());
    for (int i = 0; i < kSteps; ++i) r.losses.push_back(tr.step().loss);
    for (nn::Parameter* p : tr.parameters())
      r.params[p->name].assign(p->data.f32(), p->data.f32() + p->size());
    return r;
  }();
  return t;
}

void expect_losses(const std::vector<double>& a, const std::vector<double>& b,
                   const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_LE(std::abs(a[i] - b[i]), 1e-5 * std::abs(b[i]))
        << what << " step " << i << ": " << a[i] << " vs " << b[i];
}

// Max difference within 1e-5 of the tensor's largest value (a relative
// bound per element would demand exact agreement of values near zero).
void expect_tensor(const float* a, const std::vector<float>& b, const std::string& what) {
  double scale = 0, worst = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    scale = std::max(scale, double(std::abs(b[i])));
    worst = std::max(worst, double(std::abs(a[i] - b[i])));
  }
  EXPECT_LE(worst, 1e-5 * std::max(scale, 1e-2)) << what << " max diff " << worst;
}

// Runs 10 steps of the dp x tp layout (one pipeline stage: the GPT's
// tensor-parallel layers under ParallelTrainer, the one trainer of every
// layout) and compares with the serial trace.
void train_and_compare(std::shared_ptr<Communicator> world, int dp, int tp, bool sp,
                       const std::string& what) {
  set_num_threads(1);
  const Trace& ref = serial();
  Mesh mesh(world, dp, tp, 1);
  ParallelOptions po;
  po.sequence_parallel = sp;
  ParallelModel model(gpt_spec(config(), 5), mesh, po);
  nn::ByteText data(text_bytes(), 8, "tp test text");
  nn::AdamW opt = optimizer();
  ParallelTrainer tr(model, data, opt, schedule(), train_options());
  std::vector<double> losses;
  for (int i = 0; i < kSteps; ++i) losses.push_back(tr.step().loss);
  expect_losses(losses, ref.losses, what + " loss");
  ASSERT_EQ(model.shards().size(), ref.params.size()) << what;
  for (const Sharded& s : model.shards()) {
    Tensor full = gather_shards(s.param->data, s.spec, s.full, *mesh.tp());
    const auto& want = ref.params.at(s.param->name);
    ASSERT_EQ(size_t(full.numel()), want.size()) << what << " " << s.param->name;
    expect_tensor(full.f32(), want, what + " " + s.param->name);
  }
}

TEST(TpGpt, InitialShardsAreSlicesOfTheSerialModel) {
  testing::expect_all_pass(3, [&](int rank, int n, std::shared_ptr<Store> store) {
    auto comm = testing::make_comm(rank, n, store);
    nn::GptConfig c = config();
    c.heads = 3;
    c.dim = 12;
    c.vocab = 255;
    auto serial = nn::make_gpt(c, 9);
    std::map<std::string, nn::Parameter*> by_name;
    for (nn::Parameter* p : serial->parameters()) by_name[p->name] = p;
    ShardedModel model(gpt_spec(c, 9), comm);
    ASSERT_EQ(model.parameters().size(), by_name.size());
    // Order and names as the serial model's: optimizer state lines up.
    auto sp = serial->parameters();
    auto tpp = model.parameters();
    for (size_t i = 0; i < sp.size(); ++i) EXPECT_EQ(tpp[i]->name, sp[i]->name);
    for (const Sharded& s : model.shards()) {
      Tensor full = gather_shards(s.param->data, s.spec, s.full, *comm);
      const nn::Parameter* want = by_name.at(s.param->name);
      ASSERT_EQ(full.shape(), want->data.shape()) << s.param->name;
      for (int64_t i = 0; i < full.numel(); ++i) {
        ASSERT_EQ(full.f32()[i], want->data.f32()[i]) << s.param->name << " element " << i;
      }
      if (s.spec.dim >= 0) {
        EXPECT_EQ(s.param->size() * n, want->size()) << s.param->name << " is not split";
      }
    }
  });
}

TEST(TpGpt, TrainsAsSerialAtTp2) {
  serial();
  testing::expect_all_pass(2, [&](int rank, int n, std::shared_ptr<Store> store) {
    auto world = testing::make_comm(rank, n, store);
    train_and_compare(world, 1, 2, false, "tp=2");
    train_and_compare(world, 1, 2, true, "tp=2 sequence parallel");
  }, std::chrono::seconds(300));
}

TEST(TpGpt, TrainsAsSerialAtTp4AndDp2Tp2) {
  serial();
  testing::expect_all_pass(4, [&](int rank, int n, std::shared_ptr<Store> store) {
    auto world = testing::make_comm(rank, n, store);
    train_and_compare(world, 1, 4, false, "tp=4");
    train_and_compare(world, 1, 4, true, "tp=4 sequence parallel");
    train_and_compare(world, 2, 2, false, "dp=2 x tp=2");
  }, std::chrono::seconds(300));
}

TEST(TpGpt, SizesThatDoNotDivideAreRefusedByName) {
  testing::expect_all_pass(2, [&](int rank, int n, std::shared_ptr<Store> store) {
    auto comm = testing::make_comm(rank, n, store);
    auto refused = [&](nn::GptConfig c, const std::string& needle) {
      try {
        ShardedModel m(gpt_spec(c, 1), comm);
        ADD_FAILURE() << "accepted a config that should fail with '" << needle << "'";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), Errc::kInvalidArgument);
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      }
    };
    nn::GptConfig c = config();
    c.heads = 3;
    c.dim = 12;
    refused(c, "heads 3 is not divisible by the tensor-parallel size 2");
    c = config();
    c.vocab = 255;
    refused(c, "vocabulary 255 is not divisible by the tensor-parallel size 2");
    // Sequence parallelism needs T to divide: refused at forward, before
    // any collective (so the group stays usable).
    ShardedModel m(gpt_spec(config(), 1), comm, ShardedOptions{.sequence_parallel = true, .units = {}, .experts = {}});
    Tensor tokens({2, 7}, DType::kI32);
    nn::Context ctx;
    try {
      m.forward(tokens, ctx);
      ADD_FAILURE() << "T = 7 accepted at tp = 2";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("sequence length 7"), std::string::npos) << e.what();
    }
    tokens.resize({2, 8}, DType::kI32);
    EXPECT_EQ(m.forward(tokens, ctx).shape(), (Shape{2, 8, 128}));
    // A token outside the vocabulary is refused by the vocab-parallel
    // embedding on every rank, before its all-reduce.
    tokens.i32()[3] = 256;
    try {
      m.forward(tokens, ctx);
      ADD_FAILURE() << "token 256 accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("token 256 outside vocabulary [0, 256)"), std::string::npos)
          << e.what();
    }
  });
}

}  // namespace
}  // namespace braid::parallel::tp
