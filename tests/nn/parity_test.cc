// Parity with PyTorch (llm.c style): tests/fixtures/parity.ckpt holds the
// inputs, weights, loss and every gradient of a small MLP and a small GPT,
// computed by PyTorch in float64 (scripts/gen_parity_fixture.py). braid's
// f32 forward/backward must match within 1e-4 relative.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <sstream>

#include "braid/checkpoint.h"
#include "braid/loss.h"
#include "braid/models.h"

using namespace braid;
using namespace braid::nn;

namespace {

std::string fixture() {
  // ctest sets BRAID_SOURCE_DIR; when run by hand, find the fixture next to
  // this source file.
  const char* src = std::getenv("BRAID_SOURCE_DIR");
  if (src) return std::string(src) + "/tests/fixtures/parity.ckpt";
  std::string self = __FILE__;
  return self.substr(0, self.rfind("/nn/")) + "/fixtures/parity.ckpt";
}

// max |a − b| / max |b| over the tensor: relative to the tensor's scale so
// that near-zero entries do not dominate.
double rel_err(const Tensor& a, const Tensor& b) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    num = std::max(num, double(std::fabs(a.f32()[i] - b.f32()[i])));
    den = std::max(den, double(std::fabs(b.f32()[i])));
  }
  return num / std::max(den, 1e-30);
}

void check(Sequential& model, const Checkpoint& ck, const std::string& pre) {
  auto params = model.parameters();
  for (Parameter* p : params) {
    auto it = ck.tensors.find(pre + "/model/" + p->name);
    ASSERT_NE(it, ck.tensors.end()) << p->name;
    p->data.copy_from(it->second);
  }
  const Tensor& x = ck.tensors.at(pre + "/x");
  const Tensor& y = ck.tensors.at(pre + "/y");
  Context ctx;
  SoftmaxCrossEntropy ce;
  zero_grad(params);
  const Tensor& logits = model.forward(x, ctx);
  double loss = ce.forward(logits, y) / double(y.numel());
  model.backward(ce.backward(float(1.0 / double(y.numel()))), ctx);
  double ref = std::stod(ck.meta.at(pre + "/loss"));
  EXPECT_NEAR(loss, ref, 1e-4 * std::fabs(ref)) << pre << " loss";
  for (Parameter* p : params) {
    const Tensor& g = ck.tensors.at(pre + "/grad/" + p->name);
    ASSERT_EQ(g.shape(), p->grad.shape()) << p->name;
    EXPECT_LT(rel_err(p->grad, g), 1e-4) << pre << " gradient of " << p->name;
  }
}

// The fixture's GPT, built with or without activation recomputation.
void check_gpt(bool recompute) {
  Checkpoint ck = load_checkpoint(fixture());
  GptConfig c;
  c.vocab = std::stoll(ck.meta.at("gpt/vocab"));
  c.context = std::stoll(ck.meta.at("gpt/context"));
  c.layers = std::stoll(ck.meta.at("gpt/layers"));
  c.dim = std::stoll(ck.meta.at("gpt/dim"));
  c.heads = std::stoll(ck.meta.at("gpt/heads"));
  c.recompute = recompute;
  auto model = make_gpt(c, 0);
  check(*model, ck, "gpt");
}

}  // namespace

TEST(Parity, MlpMatchesPyTorch) {
  Checkpoint ck = load_checkpoint(fixture());
  std::vector<int64_t> sizes;
  std::stringstream ss(ck.meta.at("mlp/sizes"));
  for (std::string s; std::getline(ss, s, ',');) sizes.push_back(std::stoll(s));
  auto model = make_mlp(sizes, 0);
  check(*model, ck, "mlp");
}

TEST(Parity, GptMatchesPyTorch) { check_gpt(false); }

TEST(Parity, GptWithRecomputeMatchesPyTorch) { check_gpt(true); }
