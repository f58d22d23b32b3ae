// Each tensor-parallel piece against its serial twin, at tp = 2 and 3 (one
// real-process job per size, every case inside it): the communication
// operators against their definitions; column- and row-parallel linear,
// the parallel MLP and attention (plain and sequence parallel, dropout on),
// the vocab-parallel embedding and cross-entropy — forward output, input
// gradient and parameter gradients (shards gathered) within 1e-5 of the
// serial layer's. The parallel MLP's collectives are counted (one
// all_reduce each way), and its gradients pass a finite-difference check.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <string>

#include "braid/comm.h"
#include "braid/kernels.h"
#include "braid/layers.h"
#include "braid/loss.h"
#include "braid/rng.h"
#include "braid/tensor_parallel.h"
#include "support/multiproc.h"
#include "support/refused.h"

namespace braid::parallel::tp {
namespace {

using Comm = std::shared_ptr<Communicator>;

Tensor random(Shape s, uint64_t seed, float scale = 1.0f) {
  Tensor t(std::move(s));
  CounterRng rng(seed, 3);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = rng.normal() * scale;
  return t;
}

// Max difference within tol of the reference's largest value.
void expect_close(const Tensor& a, const Tensor& b, const std::string& what, double tol = 1e-5) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  double scale = 0, worst = 0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    scale = std::max(scale, double(std::abs(b.f32()[i])));
    worst = std::max(worst, double(std::abs(a.f32()[i] - b.f32()[i])));
  }
  EXPECT_GT(scale, 0.0) << what << ": the reference is all zeros, nothing is compared";
  EXPECT_LE(worst, tol * std::max(scale, 1e-3)) << what << " max diff " << worst;
}

// The full tensor from its blocks along T (sequence) or the last dim.
Tensor gather_seq(const Tensor& x, const Comm& c) {
  GatherFromSequenceRegion g("test.gather_seq", c);
  nn::Context ctx;
  return g.forward(x, ctx);
}
Tensor slice_seq(const Tensor& x, const Comm& c) {
  ScatterToSequenceRegion s("test.scatter_seq", c);
  nn::Context ctx;
  return s.forward(x, ctx);
}
Tensor slice_last(const Tensor& x, const Comm& c) {
  return slice_shard(x, ShardSpec{x.ndim() - 1, 1, false}, c->rank(), c->size());
}

// Gives the parallel layer the serial layer's parameters (sliced).
void copy_params(nn::Module& serial, const std::vector<Sharded>& shards, const Comm& c) {
  std::map<std::string, nn::Parameter*> by_name;
  for (nn::Parameter* p : serial.parameters()) by_name[p->name] = p;
  ASSERT_EQ(by_name.size(), shards.size());
  for (const Sharded& s : shards)
    s.param->data.copy_from(slice_shard(by_name.at(s.param->name)->data, s.spec, c->rank(),
                                        c->size()));
}
void expect_grads(nn::Module& serial, const std::vector<Sharded>& shards, const Comm& c,
                  const std::string& what) {
  std::map<std::string, nn::Parameter*> by_name;
  for (nn::Parameter* p : serial.parameters()) by_name[p->name] = p;
  for (const Sharded& s : shards) {
    Tensor g = s.param->grad;
    if (s.spec.partial_grad)
      c->all_reduce(g.f32(), g.f32(), size_t(g.numel()), DType::kF32, ReduceOp::kSum);
    expect_close(gather_shards(g, s.spec, s.full, *c), by_name.at(s.param->name)->grad,
                 what + " grad " + s.param->name);
  }
}

nn::Context train_ctx() {
  nn::Context ctx;
  ctx.seed = 3;
  ctx.step = 2;
  ctx.sample_offset = 5;
  return ctx;
}

int count_ops(const Comm& c, const std::string& op) {
  std::string rec = c->flight_record();
  int k = 0;
  for (size_t at = rec.find(" " + op + " "); at != std::string::npos;
       at = rec.find(" " + op + " ", at + 1))
    ++k;
  return k;
}

void mappings(const Comm& c) {
  const int n = c->size(), r = c->rank();
  nn::Context ctx;
  Tensor full = random({2, 3 * n, 2 * n}, 1);  // same on every rank
  Tensor mine = random({2, 3 * n, 2 * n}, 100 + uint64_t(r));
  Tensor sum = random({2, 3 * n, 2 * n}, 100);
  for (int q = 1; q < n; ++q) {
    Tensor o = random({2, 3 * n, 2 * n}, 100 + uint64_t(q));
    for (int64_t i = 0; i < sum.numel(); ++i) sum.f32()[i] += o.f32()[i];
  }
  CopyToTpRegion copy("copy", c);
  EXPECT_EQ(&copy.forward(mine, ctx), &mine);
  expect_close(copy.backward(mine, ctx), sum, "copy backward");
  ReduceFromTpRegion reduce("reduce", c);
  expect_close(reduce.forward(mine, ctx), sum, "reduce forward");
  EXPECT_EQ(&reduce.backward(mine, ctx), &mine);
  ScatterToTpRegion scatter("scatter", c);
  GatherFromTpRegion gather("gather", c);
  Tensor part = scatter.forward(full, ctx);
  EXPECT_EQ(part.shape(), (Shape{2, 3 * n, 2}));
  expect_close(gather.forward(part, ctx), full, "gather(scatter(x))");
  expect_close(scatter.backward(part, ctx), full, "scatter backward");
  expect_close(gather.backward(full, ctx), part, "gather backward");
  ScatterToSequenceRegion sscatter("sscatter", c);
  GatherFromSequenceRegion sgather("sgather", c);
  ReduceScatterToSequenceRegion rs("rs", c);
  Tensor rows = sscatter.forward(full, ctx);
  EXPECT_EQ(rows.shape(), (Shape{2, 3, 2 * n}));
  for (int b = 0; b < 2; ++b)  // this rank's positions [3r, 3r + 3)
    for (int64_t i = 0; i < 3 * 2 * n; ++i)
      ASSERT_EQ(rows.f32()[b * 6 * n + i], full.f32()[(b * 3 * n + 3 * r) * 2 * n + i]);
  expect_close(sgather.forward(rows, ctx), full, "sequence gather(scatter(x))");
  expect_close(sscatter.backward(rows, ctx), full, "sequence scatter backward");
  Tensor sum_rows = slice_seq(sum, c);
  expect_close(sgather.backward(mine, ctx), sum_rows, "sequence gather backward");
  expect_close(rs.forward(mine, ctx), sum_rows, "reduce_scatter forward");
  expect_close(rs.backward(rows, ctx), full, "reduce_scatter backward");
}

void linears(const Comm& c) {
  const int n = c->size();
  nn::Context ctx = train_ctx();
  Tensor x = random({3, 4, 5}, 2), dy = random({3, 4, 12}, 3);
  {
    nn::Linear serial("col", 5, 12);
    for (nn::Parameter* p : serial.parameters()) p->data = random(p->data.shape(), 4);
    ColumnParallelLinear par("col", 5, 12, c, {true, 1, true, SeqMode::kReplicated});
    std::vector<Sharded> shards;
    par.collect_shards(shards);
    copy_params(serial, shards, c);
    expect_close(par.forward(x, ctx), serial.forward(x, ctx), "column forward");
    expect_close(par.backward(dy, ctx), serial.backward(dy, ctx), "column dx");
    expect_grads(serial, shards, c, "column");
  }
  {
    Tensor xr = random({3, 4, 12}, 5), dyr = random({3, 4, 5}, 6);
    nn::Linear serial("row", 12, 5);
    for (nn::Parameter* p : serial.parameters()) p->data = random(p->data.shape(), 7);
    RowParallelLinear par("row", 12, 5, c, {true, SeqMode::kReplicated});
    std::vector<Sharded> shards;
    par.collect_shards(shards);
    copy_params(serial, shards, c);
    Tensor xr_mine = slice_last(xr, c);  // layers keep a pointer to their input
    expect_close(par.forward(xr_mine, ctx), serial.forward(xr, ctx), "row forward");
    expect_close(par.backward(dyr, ctx), slice_last(serial.backward(dyr, ctx), c), "row dx");
    expect_grads(serial, shards, c, "row");
  }
  (void)n;
}

// A parallel sublayer against its serial twin, plain or sequence parallel.
template <class Par, class Ser>
void sublayer(const Comm& c, Par& par, std::vector<Sharded>& shards, Ser& serial, SeqMode mode,
              const std::string& what) {
  const bool sp = mode == SeqMode::kSequenceParallel;
  for (nn::Parameter* p : serial.parameters()) p->data = random(p->data.shape(), 8, 0.3f);
  copy_params(serial, shards, c);
  nn::Context ctx = train_ctx();
  const int64_t T = 2 * c->size();
  Tensor x = random({3, T, 12}, 9), dy = random({3, T, 12}, 10);
  Tensor x_mine = sp ? slice_seq(x, c) : x;  // layers keep a pointer to their input
  Tensor y = par.forward(x_mine, ctx);
  expect_close(sp ? gather_seq(y, c) : y, serial.forward(x, ctx), what + " forward");
  Tensor dx = par.backward(sp ? slice_seq(dy, c) : dy, ctx);
  const Tensor& want = serial.backward(dy, ctx);
  expect_close(dx, sp ? slice_seq(want, c) : want, what + " dx");
  expect_grads(serial, shards, c, what);
}

void blocks(const Comm& c) {
  for (SeqMode mode : {SeqMode::kReplicated, SeqMode::kSequenceParallel}) {
    std::string tag = mode == SeqMode::kSequenceParallel ? " (sequence parallel)" : "";
    {
      nn::MlpBlock serial("mlp", 12, 48, 0.25f, 7);
      ParallelMlp par("mlp", 12, 48, c, mode, 0.25f, 7);
      std::vector<Sharded> shards;
      par.collect_shards(shards);
      sublayer(c, par, shards, serial, mode, "mlp" + tag);
    }
    {
      nn::CausalSelfAttention serial("attn", 12, 6, 0.25f, 3);
      ParallelAttention par("attn", 12, 6, c, mode, 0.25f, 3);
      std::vector<Sharded> shards;
      par.collect_shards(shards);
      sublayer(c, par, shards, serial, mode, "attention" + tag);
    }
  }
}

void embedding_and_loss(const Comm& c) {
  const int n = c->size();
  const int64_t V = 12, T = 2 * n;
  Tensor tokens({3, T}, DType::kI32);
  for (int64_t i = 0; i < tokens.numel(); ++i) tokens.i32()[i] = int32_t((i * 5 + 1) % V);
  for (SeqMode mode : {SeqMode::kReplicated, SeqMode::kSequenceParallel}) {
    const bool sp = mode == SeqMode::kSequenceParallel;
    nn::Embedding serial("emb", V, 4, 8);
    VocabParallelEmbedding par("emb", V, 4, 8, c, mode);
    for (nn::Parameter* p : serial.parameters()) p->data = random(p->data.shape(), 11);
    std::vector<Sharded> shards;
    par.collect_shards(shards);
    copy_params(serial, shards, c);
    nn::Context ctx;
    Tensor y = par.forward(tokens, ctx);
    expect_close(sp ? gather_seq(y, c) : y, serial.forward(tokens, ctx),
                 std::string("embedding forward") + (sp ? " sp" : ""));
    Tensor dy = random({3, T, 4}, 12);
    par.backward(sp ? slice_seq(dy, c) : dy, ctx);
    serial.backward(dy, ctx);
    expect_grads(serial, shards, c, std::string("embedding") + (sp ? " sp" : ""));
  }
  Tensor logits = random({3, T, V}, 13, 3.0f);
  nn::SoftmaxCrossEntropy serial;
  VocabParallelCrossEntropy par(c);
  double want = serial.forward(logits, tokens);
  double got = par.forward(slice_last(logits, c), tokens);
  EXPECT_LE(std::abs(got - want), 1e-5 * std::abs(want)) << got << " vs " << want;
  EXPECT_EQ(par.correct(), serial.correct());
  expect_close(par.backward(0.25f), slice_last(serial.backward(0.25f), c), "cross-entropy dlogits");
  // Ties: logits in {-1, 0, 1} (every row has several maxima, often on
  // different ranks); the first maximum is the prediction, as serially.
  Tensor tied = random({3, T, V}, 14, 3.0f);
  for (int64_t i = 0; i < tied.numel(); ++i)
    tied.f32()[i] = std::clamp(std::round(tied.f32()[i]), -1.0f, 1.0f);
  serial.forward(tied, tokens);
  par.forward(slice_last(tied, c), tokens);
  EXPECT_EQ(par.correct(), serial.correct()) << "with tied logits";
  Tensor flat({3, T, V}, DType::kF32);  // all equal: only target 0 is correct
  for (int64_t i = 0; i < flat.numel(); ++i) flat.f32()[i] = 0.5f;
  serial.forward(flat, tokens);
  par.forward(slice_last(flat, c), tokens);
  EXPECT_EQ(par.correct(), serial.correct()) << "with all-equal logits";
}

// One all_reduce forward, one backward, and nothing else: counted on a
// communicator of its own (its flight recorder holds only these calls).
void mlp_communication(const Comm& c) {
  Comm mine = c->split(0, c->rank());
  ParallelMlp mlp("mlp", 12, 48, mine, SeqMode::kReplicated, 0.1f, 1);
  nn::Context ctx = train_ctx();
  Tensor x = random({2, 2 * c->size(), 12}, 14);
  const int before = count_ops(mine, "all_reduce");
  const Tensor& y = mlp.forward(x, ctx);
  EXPECT_EQ(count_ops(mine, "all_reduce") - before, 1) << mine->flight_record();
  mlp.backward(y, ctx);
  EXPECT_EQ(count_ops(mine, "all_reduce") - before, 2) << mine->flight_record();
  EXPECT_EQ(count_ops(mine, "all_gather"), 0);
  EXPECT_EQ(count_ops(mine, "reduce_scatter"), 0);

  ParallelMlp smlp("mlp", 12, 48, mine, SeqMode::kSequenceParallel, 0.1f, 1);
  Tensor xs = slice_seq(x, mine);  // a local copy, no collective
  const int ag = count_ops(mine, "all_gather"), rsc = count_ops(mine, "reduce_scatter");
  const Tensor& ys = smlp.forward(xs, ctx);
  smlp.backward(ys, ctx);
  EXPECT_EQ(count_ops(mine, "all_gather") - ag, 2) << mine->flight_record();
  EXPECT_EQ(count_ops(mine, "reduce_scatter") - rsc, 2) << mine->flight_record();
  EXPECT_EQ(count_ops(mine, "all_reduce") - before, 2) << mine->flight_record();
}

// Finite differences through the parallel MLP: L = Σ y ⊙ R (the same on
// every rank); each sampled element of each rank's fc and proj shards is
// nudged by its owner while all ranks run the forward together.
void mlp_gradcheck(const Comm& c) {
  ParallelMlp mlp("mlp", 6, 24, c);
  std::vector<Sharded> shards;
  mlp.collect_shards(shards);
  for (const Sharded& s : shards) s.param->data = random(s.param->data.shape(), 15 + c->rank());
  nn::Context ctx;
  Tensor x = random({2, 3, 6}, 16), r = random({2, 3, 6}, 17);
  auto loss = [&]() {
    const Tensor& y = mlp.forward(x, ctx);
    double s = 0;
    for (int64_t i = 0; i < y.numel(); ++i) s += double(y.f32()[i]) * double(r.f32()[i]);
    return s;
  };
  loss();
  for (const Sharded& s : shards) s.param->grad.zero();
  Tensor dx = mlp.backward(r, ctx);
  const double eps = 1e-2;
  CounterRng pick(99, 1);
  for (const Sharded& s : shards) {
    double gmax = 0;
    for (int64_t i = 0; i < s.param->size(); ++i)
      gmax = std::max(gmax, double(std::abs(s.param->grad.f32()[i])));
    for (int owner = 0; owner < c->size(); ++owner)
      for (int k = 0; k < 6; ++k) {
        int64_t i = int64_t(pick.below(uint64_t(s.param->size())));
        float* v = s.param->data.f32() + i;
        const float orig = *v;
        if (c->rank() == owner) *v = orig + float(eps);
        double lp = loss();
        if (c->rank() == owner) *v = orig - float(eps);
        double lm = loss();
        *v = orig;
        if (c->rank() != owner) continue;
        double fd = (lp - lm) / (2 * eps);
        EXPECT_NEAR(s.param->grad.f32()[i], fd, 2e-2 * std::max(gmax, 1e-3) + 1e-4)
            << s.param->name << " element " << i << " on rank " << owner;
      }
  }
  // And the input: every rank nudges the same element of the shared input.
  double gmax = 0;
  for (int64_t i = 0; i < dx.numel(); ++i) gmax = std::max(gmax, double(std::abs(dx.f32()[i])));
  for (int k = 0; k < 6; ++k) {
    int64_t i = int64_t(pick.below(uint64_t(x.numel())));
    const float orig = x.f32()[i];
    x.f32()[i] = orig + float(eps);
    double lp = loss();
    x.f32()[i] = orig - float(eps);
    double lm = loss();
    x.f32()[i] = orig;
    EXPECT_NEAR(dx.f32()[i], (lp - lm) / (2 * eps), 2e-2 * std::max(gmax, 1e-3) + 1e-4)
        << "input element " << i;
  }
}

void bad_sizes(const Comm& c) {
  const int n = c->size();
  const std::string by = " is not divisible by the tensor-parallel size " + std::to_string(n);
  const int64_t odd = 6 * n + 1;
  testing::expect_refused([&] { ParallelAttention("a", 4 * (n + 1), n + 1, c); },
                          "heads " + std::to_string(n + 1) + by);
  testing::expect_refused([&] { ParallelMlp("m", 8, odd, c); },
                          "m.fc: output features " + std::to_string(odd) + by);
  testing::expect_refused([&] { RowParallelLinear("r", odd, 4, c, {}); },
                          "input features " + std::to_string(odd) + by);
  testing::expect_refused(
      [&] {
        ColumnParallelLinear("q", 4, 3 * odd, c, {true, 3, false, SeqMode::kReplicated});
      },
      "q: output features per part " + std::to_string(odd) + by);
  testing::expect_refused([&] { VocabParallelEmbedding("e", odd, 4, 8, c); },
                          "vocabulary " + std::to_string(odd) + by);
  ScatterToSequenceRegion s("s", c);
  nn::Context ctx;
  testing::expect_refused(
      [&] {
        s.forward(Tensor({2, odd, 3}), ctx);
      },
      "sequence length " + std::to_string(odd) + by);
}

void all_layers(int world) {
  testing::expect_all_pass(world, [&](int rank, int n, std::shared_ptr<Store> store) {
    set_num_threads(1);
    auto c = testing::make_comm(rank, n, store);
    mappings(c);
    linears(c);
    blocks(c);
    embedding_and_loss(c);
    mlp_communication(c);
    mlp_gradcheck(c);
    bad_sizes(c);
  }, std::chrono::seconds(300));
}

TEST(TpLayers, EqualSerialAtTp2) { all_layers(2); }
TEST(TpLayers, EqualSerialAtTp3) { all_layers(3); }

}  // namespace
}  // namespace braid::parallel::tp
