// Each ZeRO policy holds what it claims, at world 2 and 3 (real processes),
// against the serial run's bytes P of parameters and S of optimizer state:
//   full parameters in the model between steps   P (stages 0–2), none (3)
//   full gradients in the model between steps    P (stages 0–1), none (2–3)
//   optimizer state                              S everywhere (0); a chunk
//                                                per rank, the chunks
//                                                summing to S (1–3)
// and DataParallel::memory() reports the same: the sharded parts summing
// over ranks to P (plus padding), the replicated ones P on every rank.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "braid/checkpoint.h"
#include "braid/dp_trainer.h"
#include "braid/kernels.h"
#include "braid/models.h"
#include "braid/trainer.h"
#include "support/multiproc.h"

namespace braid::parallel {
namespace {

constexpr int64_t kBatch = 12;  // 6 or 4 rows per rank at world 2 or 3

nn::ByteText text() {
  std::string s;
  for (int i = 0; i < 200; ++i) s += "sharded state, summed over ranks " + std::to_string(i % 7);
  return nn::ByteText(std::vector<uint8_t>(s.begin(), s.end()), 8, "zero policy text");
}

std::unique_ptr<nn::Sequential> model() {
  nn::GptConfig c;
  c.context = 8;
  c.layers = 2;
  c.dim = 16;
  c.heads = 2;
  return nn::make_gpt(c, 3);
}

nn::TrainOptions train_options() {
  nn::TrainOptions o;
  o.global_batch = kBatch;
  o.seed = 5;
  return o;
}

int64_t state_bytes(const nn::Optimizer& opt) {
  Checkpoint ck;
  opt.save_state(ck);
  int64_t n = 0;
  for (auto& [k, t] : ck.tensors) n += int64_t(t.nbytes());
  return n;
}

// Bytes of the model's full parameters (data) or gradients (grad) that exist.
int64_t held(const std::vector<nn::Parameter*>& ps, bool grads) {
  int64_t n = 0;
  for (auto* p : ps) n += int64_t((grads ? p->grad : p->data).nbytes());
  return n;
}

struct Serial {
  int64_t param_bytes = 0, optim_bytes = 0;
};

// The single-process figures: one AdamW step's state, the model's bytes.
Serial serial() {
  set_num_threads(1);
  nn::ByteText data = text();
  auto m = model();
  nn::AdamW opt(0.9f, 0.999f, 1e-6f, 0.01f);
  nn::Trainer t(*m, data, opt, nn::LrSchedule{}, train_options());
  t.step();
  return {held(t.parameters(), false), state_bytes(opt)};
}

// What one rank holds after two steps, in the order of the fields.
enum Field {
  kFullParams, kFullGrads, kOptim,       // observed in the model and optimizer
  kMemParams, kMemGrads, kMemOptim,      // DataParallel::memory()
  kPeak, kBuckets, kN
};

void check_world(int world) {
  const Serial ref = serial();
  ASSERT_GT(ref.param_bytes, 0);
  ASSERT_EQ(ref.optim_bytes, 2 * ref.param_bytes);  // AdamW: m and v
  testing::expect_all_pass(world, [&](int rank, int n, std::shared_ptr<Store> store) {
    auto comm = Communicator::create(rank, n, store);
    set_num_threads(1);
    const int64_t P = ref.param_bytes, S = ref.optim_bytes;
    for (int zero = 0; zero <= 3; ++zero) {
      const std::string what = "world " + std::to_string(n) + " ZeRO-" + std::to_string(zero);
      nn::ByteText data = text();
      auto m = model();
      nn::AdamW opt(0.9f, 0.999f, 1e-6f, 0.01f);
      DpOptions o;
      o.zero = zero;
      o.first_bucket_bytes = 512;
      o.bucket_bytes = 4096;
      DpTrainer t(comm, *m, data, opt, nn::LrSchedule{}, train_options(), o);
      t.step();
      t.step();
      // Settle pending gathers (ZeRO-3 prefetches its first unit after a step).
      t.dp().gather_all_params();
      t.dp().release_all_params();
      const auto params = m->parameters();
      const DpMemory mem = t.memory();
      int64_t mine[kN] = {held(params, false), held(params, true), state_bytes(opt),
                          mem.param_bytes,     mem.grad_bytes,     mem.optim_bytes,
                          mem.peak_transient_bytes, int64_t(t.dp().num_buckets())};
      std::vector<int64_t> all(size_t(kN * n));
      comm->all_gather(mine, all.data(), kN, DType::kI64);
      auto at = [&](int r, Field f) { return all[size_t(r * kN + f)]; };
      auto sum = [&](Field f) {
        int64_t s = 0;
        for (int r = 0; r < n; ++r) s += at(r, f);
        return s;
      };
      // Padding: each bucket rounds up to a multiple of the world size.
      const int64_t pad = 4 * int64_t(n) * at(0, kBuckets);
      EXPECT_EQ(mine[kOptim], mine[kMemOptim]) << what;
      for (int r = 0; r < n; ++r) {
        const std::string who = what + " rank " + std::to_string(r);
        // Parameters.
        if (zero <= 2) {
          EXPECT_EQ(at(r, kFullParams), P) << who;
          EXPECT_GE(at(r, kMemParams), P) << who;
          EXPECT_LE(at(r, kMemParams), P + pad) << who;
        } else {
          EXPECT_EQ(at(r, kFullParams), 0) << who;
          EXPECT_LT(at(r, kMemParams), P) << who;
        }
        // Gradients.
        if (zero <= 1) {
          EXPECT_EQ(at(r, kFullGrads), P) << who;
          EXPECT_GE(at(r, kMemGrads), P) << who;
          EXPECT_LE(at(r, kMemGrads), P + pad) << who;
          EXPECT_EQ(at(r, kPeak), 0) << who << ": nothing allocated per step";
        } else {
          EXPECT_EQ(at(r, kFullGrads), 0) << who;
          EXPECT_LT(at(r, kMemGrads), P) << who;
          // Full buffers exist only while a unit needs them: some, never
          // all of the parameters and gradients at once.
          EXPECT_GT(at(r, kPeak), 0) << who;
          EXPECT_LT(at(r, kPeak), 2 * P) << who;
        }
        // Optimizer state.
        if (zero == 0) {
          EXPECT_EQ(at(r, kOptim), S) << who;
        } else {
          EXPECT_LT(at(r, kOptim), S) << who;
          EXPECT_LE(at(r, kOptim), S / n + 2 * pad) << who;
        }
      }
      // The chunks of what is sharded partition the serial state.
      if (zero >= 1) {
        EXPECT_EQ(sum(kOptim), S) << what;
      }
      if (zero >= 2) {
        EXPECT_GE(sum(kMemGrads), P) << what;
        EXPECT_LE(sum(kMemGrads), P + pad) << what;
      }
      if (zero == 3) {
        EXPECT_GE(sum(kMemParams), P) << what;
        EXPECT_LE(sum(kMemParams), P + pad) << what;
      }
    }
  });
}

TEST(ZeroPolicy, ShardsWhatItClaimsAtWorld2) { check_world(2); }
TEST(ZeroPolicy, ShardsWhatItClaimsAtWorld3) { check_world(3); }

}  // namespace
}  // namespace braid::parallel
