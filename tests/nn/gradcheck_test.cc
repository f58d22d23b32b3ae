// Finite-difference gradient checks for every layer and the loss.
//
// The scalar is L = Σ y ⊙ R for a fixed random R (accumulated in double),
// so dL/dy = R. Central differences with eps = 1e-2 in f32 forward passes;
// up to 24 random elements of the input and of every parameter are checked
// with a tolerance relative to the tensor's largest analytic gradient.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "braid/error.h"
#include "braid/layers.h"
#include "braid/loss.h"
#include "braid/models.h"
#include "braid/rng.h"

using namespace braid;
using namespace braid::nn;

namespace {

void randomize(Tensor& t, CounterRng& rng, float scale = 1.0f) {
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = rng.normal() * scale;
}

double project(const Tensor& y, const Tensor& r) {
  double s = 0;
  for (int64_t i = 0; i < y.numel(); ++i) s += double(y.f32()[i]) * double(r.f32()[i]);
  return s;
}

struct Check {
  double eps = 1e-2;
  double rtol = 2e-2;
  int samples = 24;
  bool check_input = true;
};

// Compares analytic and numeric gradients of one tensor `v` (input or
// parameter values), whose analytic gradient is `g`.
void compare(const std::string& what, Tensor& v, const Tensor& g, const std::function<double()>& f,
             const Check& c, CounterRng& rng) {
  double gmax = 0;
  for (int64_t i = 0; i < g.numel(); ++i) gmax = std::max(gmax, double(std::fabs(g.f32()[i])));
  int n = int(std::min<int64_t>(c.samples, v.numel()));
  for (int k = 0; k < n; ++k) {
    int64_t i = n == v.numel() ? k : int64_t(rng.below(uint64_t(v.numel())));
    float orig = v.f32()[i];
    v.f32()[i] = float(orig + c.eps);
    double lp = f();
    v.f32()[i] = float(orig - c.eps);
    double lm = f();
    v.f32()[i] = orig;
    double fd = (lp - lm) / (2 * c.eps);
    double an = g.f32()[i];
    EXPECT_NEAR(an, fd, c.rtol * std::max(gmax, 1e-3) + 1e-4)
        << what << " element " << i << " analytic " << an << " numeric " << fd;
  }
}

void gradcheck(Module& m, Tensor x, const Check& c = {}, uint64_t seed = 7) {
  CounterRng rng(seed, 99);
  Context ctx;
  const Tensor& y0 = m.forward(x, ctx);
  Tensor r(y0.shape());
  randomize(r, rng);
  auto params = m.parameters();
  zero_grad(params);
  // Fire-once check of the grad-ready hook rides along on every layer.
  std::map<std::string, int> fired;
  ctx.grad_ready = [&](Parameter& p) { fired[p.name]++; };
  const Tensor& dx0 = m.backward(r, ctx);
  ctx.grad_ready = nullptr;
  for (Parameter* p : params) EXPECT_EQ(fired[p->name], 1) << p->name;
  EXPECT_EQ(fired.size(), params.size());
  Tensor dx = c.check_input ? dx0 : Tensor();
  std::vector<Tensor> grads;
  for (Parameter* p : params) grads.push_back(p->grad);
  auto f = [&]() { return project(m.forward(x, ctx), r); };
  if (c.check_input) compare(m.name() + " input", x, dx, f, c, rng);
  for (size_t i = 0; i < params.size(); ++i) compare(params[i]->name, params[i]->data, grads[i], f, c, rng);
}

Tensor rand_tensor(Shape s, uint64_t seed, float scale = 1.0f) {
  Tensor t(s);
  CounterRng rng(seed);
  randomize(t, rng, scale);
  return t;
}

void randomize_params(Module& m, uint64_t seed, float scale) {
  CounterRng rng(seed, 5);
  for (Parameter* p : m.parameters()) randomize(p->data, rng, scale);
}

}  // namespace

TEST(GradCheck, Linear) {
  Linear l("lin", 7, 5);
  randomize_params(l, 1, 0.5f);
  gradcheck(l, rand_tensor({3, 4, 7}, 2));
}

TEST(GradCheck, LinearNoBias) {
  Linear l("lin", 6, 3, false);
  randomize_params(l, 3, 0.5f);
  gradcheck(l, rand_tensor({5, 6}, 4));
}

// Two Linears sharing their output buffer (set_shared_output): the second
// forward writes where the first one's output was, and each backward,
// which reads only the output's shape, still equals a plain Linear's.
TEST(Linear, SharedOutputBufferKeepsBackwardExact) {
  Linear s1("s1", 6, 5), s2("s2", 6, 5), p1("p1", 6, 5);
  randomize_params(s1, 21, 1.0f);
  randomize_params(s2, 22, 1.0f);
  p1.weight().data.copy_from(s1.weight().data);
  p1.bias()->data.copy_from(s1.bias()->data);
  s1.set_shared_output(true);
  s2.set_shared_output(true);
  Context ctx;
  Tensor x = rand_tensor({4, 6}, 23), dy = rand_tensor({4, 5}, 24);
  const Tensor& y1 = s1.forward(x, ctx);
  const Tensor& yp = p1.forward(x, ctx);
  for (int64_t i = 0; i < yp.numel(); ++i) ASSERT_EQ(y1.f32()[i], yp.f32()[i]);
  const Tensor& y2 = s2.forward(x, ctx);
  EXPECT_EQ(&y2, &y1) << "one buffer for both";
  const Tensor& dxs = s1.backward(dy, ctx);
  const Tensor& dxp = p1.backward(dy, ctx);
  for (int64_t i = 0; i < dxp.numel(); ++i) ASSERT_EQ(dxs.f32()[i], dxp.f32()[i]);
  for (int64_t i = 0; i < p1.weight().grad.numel(); ++i)
    ASSERT_EQ(s1.weight().grad.f32()[i], p1.weight().grad.f32()[i]);
  EXPECT_THROW(s1.backward(rand_tensor({3, 5}, 25), ctx), Error) << "dy of another shape";
  EXPECT_THROW(s1.set_activation(Linear::Activation::kGelu), Error);
}

TEST(GradCheck, ReLU) {
  ReLU r("relu");
  Tensor x = rand_tensor({4, 9}, 5);
  for (int64_t i = 0; i < x.numel(); ++i)  // keep away from the kink
    if (std::fabs(x.f32()[i]) < 0.05f) x.f32()[i] = 0.3f;
  gradcheck(r, x);
}

TEST(GradCheck, GELU) {
  GELU g("gelu");
  gradcheck(g, rand_tensor({4, 9}, 6, 2.0f));
}

TEST(GradCheck, LayerNorm) {
  LayerNorm ln("ln", 10);
  randomize_params(ln, 7, 1.0f);
  gradcheck(ln, rand_tensor({3, 2, 10}, 8));
}

TEST(GradCheck, EmbeddingParameters) {
  Embedding e("emb", 11, 6, 5);
  randomize_params(e, 9, 1.0f);
  Tensor tok({2, 5}, DType::kI32);
  for (int64_t i = 0; i < tok.numel(); ++i) tok.i32()[i] = int32_t((i * 7) % 11);
  Check c;
  c.check_input = false;
  gradcheck(e, tok, c);
}

TEST(Embedding, RefusesTokensOutsideTheVocabularyOrContext) {
  Embedding e("emb", 11, 6, 5);
  Context ctx;
  auto refused = [&](const Tensor& tok, const std::string& needle) {
    try {
      e.forward(tok, ctx);
      ADD_FAILURE() << "accepted tokens that should fail with '" << needle << "'";
    } catch (const Error& err) {
      EXPECT_EQ(err.code(), Errc::kInvalidArgument);
      EXPECT_NE(std::string(err.what()).find(needle), std::string::npos) << err.what();
    }
  };
  Tensor tok({2, 5}, DType::kI32);
  for (int64_t i = 0; i < tok.numel(); ++i) tok.i32()[i] = 3;
  tok.i32()[7] = 11;
  refused(tok, "Embedding emb: token 11 outside vocabulary [0, 11)");
  tok.i32()[7] = -1;
  refused(tok, "token -1 outside vocabulary");
  refused(Tensor({2, 6}, DType::kI32), "tokens [2, 6] vs expected [*, <=5]");
}

TEST(GradCheck, CausalSelfAttention) {
  CausalSelfAttention a("attn", 8, 2);
  randomize_params(a, 10, 0.4f);
  gradcheck(a, rand_tensor({2, 5, 8}, 11));
}

TEST(GradCheck, CausalSelfAttentionWithDropout) {
  // Dropout on the output and on the probabilities: fixed keys, so the
  // loss is a smooth function of the input the differences can probe.
  CausalSelfAttention a("attn", 8, 2, 0.3f, 4);
  randomize_params(a, 19, 0.5f);
  gradcheck(a, rand_tensor({2, 5, 8}, 20));
}

TEST(GradCheck, MlpBlock) {
  MlpBlock m("mlp", 6, 12);
  randomize_params(m, 12, 0.4f);
  gradcheck(m, rand_tensor({2, 3, 6}, 13));
}

TEST(GradCheck, TransformerBlock) {
  TransformerBlock b("blk", 8, 2);
  randomize_params(b, 14, 0.3f);
  gradcheck(b, rand_tensor({2, 4, 8}, 15));
}

TEST(GradCheck, DropoutWithFixedKeys) {
  Dropout d("drop", 0.3f, 1);
  gradcheck(d, rand_tensor({4, 10}, 16));
}

TEST(GradCheck, SequentialMlp) {
  auto m = make_mlp({9, 7, 6, 4}, 3);
  m->set_input_grad(true);
  Check c;  // a smaller step: hidden pre-activations near 0 would cross the ReLU kink
  c.eps = 1e-3;
  gradcheck(*m, rand_tensor({5, 9}, 17), c);
}

TEST(GradCheck, SoftmaxCrossEntropy) {
  Tensor logits = rand_tensor({6, 5}, 18, 2.0f);
  Tensor t({6}, DType::kI32);
  for (int i = 0; i < 6; ++i) t.i32()[i] = (i * 3) % 5;
  SoftmaxCrossEntropy ce;
  ce.forward(logits, t);
  Tensor g = ce.backward(1.0f);
  CounterRng rng(1);
  Check c;
  c.samples = 30;
  compare("cross-entropy logits", logits, g, [&] { return ce.forward(logits, t); }, c, rng);
}

TEST(GradCheck, WholeGptWithLoss) {
  GptConfig cfg;
  cfg.vocab = 13;
  cfg.context = 6;
  cfg.layers = 2;
  cfg.dim = 8;
  cfg.heads = 2;
  auto m = make_gpt(cfg, 4);
  randomize_params(*m, 19, 0.3f);
  Tensor tok({2, 6}, DType::kI32), tgt({2, 6}, DType::kI32);
  for (int i = 0; i < 12; ++i) {
    tok.i32()[i] = (i * 5) % 13;
    tgt.i32()[i] = (i * 7 + 1) % 13;
  }
  SoftmaxCrossEntropy ce;
  Context ctx;
  auto params = m->parameters();
  zero_grad(params);
  ce.forward(m->forward(tok, ctx), tgt);
  m->backward(ce.backward(1.0f), ctx);
  std::vector<Tensor> grads;
  for (Parameter* p : params) grads.push_back(p->grad);
  CounterRng rng(3);
  Check c;
  c.samples = 8;
  for (size_t i = 0; i < params.size(); ++i)
    compare(params[i]->name, params[i]->data, grads[i],
            [&] { return ce.forward(m->forward(tok, ctx), tgt); }, c, rng);
}
