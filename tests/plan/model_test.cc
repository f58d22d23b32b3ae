// The planner's model descriptions against braid's real models: the GPT's
// parameter count equals nn::make_gpt's, its multiply-adds per token equal
// parallel::gpt_spec's unit_costs (the pipeline cut), the MLP's equal
// nn::make_mlp's; and the worked example of docs/PLAN.md.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "braid/error.h"
#include "braid/models.h"
#include "braid/plan_model.h"
#include "braid/model_spec.h"

namespace {

using namespace braid;

double count_params(nn::Module& m) {
  double n = 0;
  for (nn::Parameter* p : m.parameters()) n += double(p->size());
  return n;
}

TEST(PlanModel, GptParametersEqualMakeGpt) {
  for (int64_t ratio : {4}) {
    nn::GptConfig c;
    c.vocab = 97;
    c.context = 24;
    c.layers = 3;
    c.dim = 48;
    c.heads = 4;
    auto gpt = nn::make_gpt(c, 1);
    const plan::ModelDesc d = plan::describe_gpt({c.layers, c.dim, c.heads, c.context, c.vocab, ratio});
    EXPECT_EQ(d.params(), count_params(*gpt));
    // Module by module, in make_gpt's order.
    ASSERT_EQ(d.layers.size(), gpt->size());
    for (size_t i = 0; i < d.layers.size(); ++i)
      EXPECT_EQ(d.layers[i].params, count_params(gpt->child(i))) << d.layers[i].name;
  }
}

TEST(PlanModel, GptMacsEqualTheModuleCostsPipelinesCutBy) {
  nn::GptConfig c;
  c.vocab = 50304;
  c.context = 1024;
  c.layers = 12;
  c.dim = 768;
  c.heads = 12;
  const std::vector<double> costs = parallel::gpt_spec(c, 1)->unit_costs();
  const plan::ModelDesc d = plan::describe_gpt({c.layers, c.dim, c.heads, c.context, c.vocab, 4});
  ASSERT_EQ(d.layers.size(), costs.size());
  for (size_t i = 0; i < costs.size(); ++i)
    EXPECT_DOUBLE_EQ(d.layers[i].macs, costs[i] * double(c.context)) << d.layers[i].name;
}

TEST(PlanModel, ModelFlopsAreSixNPerTokenPlusAttention) {
  const plan::ModelDesc d = plan::parse_model("gpt-175b");
  const double h = 12288, s = 2048, L = 96;
  // 6·N·tokens counts every parameter as a multiply-add; the embeddings'
  // gathers are not multiply-adds, attention adds 12·L·s·h per token.
  const double emb = d.layers.front().params;
  const double expect = 6 * (d.params() - emb) * s + 12 * L * s * h * s;
  EXPECT_NEAR(d.model_flops_per_sample() / expect, 1.0, 1e-3);
  // GPT-3's 174.6 billion with a tied head; make_gpt's head is its own
  // 12288 × 51200 matrix (+0.63 billion).
  EXPECT_NEAR(d.params() / 1e9, 175.2, 0.1);
  // The seeds' example: fp32 gradients of 175B parameters are ~700 GB.
  EXPECT_NEAR(d.params() * 4 / 1e9, 700, 5);
}

TEST(PlanModel, MlpParametersEqualMakeMlp) {
  auto mlp = nn::make_mlp({784, 256, 128, 10}, 1);
  const plan::ModelDesc d = plan::parse_model("mlp:784,256,128,10");
  EXPECT_EQ(d.params(), count_params(*mlp));
  EXPECT_EQ(d.forward_flops_per_sample(), 2.0 * (784 * 256 + 256 * 128 + 128 * 10));
  const std::vector<double> costs = parallel::mlp_spec({784, 256, 128, 10}, 1)->unit_costs();
  ASSERT_EQ(costs.size(), d.layers.size());
  for (size_t i = 0; i < costs.size(); ++i) EXPECT_EQ(d.layers[i].macs, costs[i]);
}

TEST(PlanModel, DlrmCountsTablesAndMlps) {
  const plan::ModelDesc d = plan::parse_model("dlrm:tables=2,rows=100,dim=4,dense=3,bottom=8,top=6");
  // bottom 3→8→4, tables 2×100×4, top (4 + 3·2/2 = 7)→6→1.
  EXPECT_EQ(d.params(), (3 * 8 + 8) + (8 * 4 + 4) + 2 * 400 + (7 * 6 + 6) + (6 + 1));
}

TEST(PlanModel, BadSpecsNameTheKey) {
  auto msg = [](const std::string& spec) {
    try {
      plan::parse_model(spec);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(msg("gpt:layers=2,hidden=64,heads=4,seq=8").find("missing vocab"), std::string::npos);
  EXPECT_NE(msg("gpt:layers=2,hidden=64,heads=5,seq=8,vocab=9").find("heads"), std::string::npos);
  EXPECT_NE(msg("gpt:layers=x,hidden=64,heads=4,seq=8,vocab=9").find("layers=x"), std::string::npos);
  EXPECT_NE(msg("gpt:layer=2,hidden=64,heads=4,seq=8,vocab=9").find("unknown key 'layer'"),
            std::string::npos);
  EXPECT_NE(msg("bert:layers=2").find("unknown model kind"), std::string::npos);
  // Sizes past any model's are refused before anything is built from them
  // (a layer each: 10^12 layers would exhaust memory; DLRM's interaction is
  // tables^2 / 2, which overflowed int64 at 2^32 tables).
  EXPECT_NE(msg("gpt:layers=1000000000000,hidden=64,heads=4,seq=8,vocab=9").find("layers=1000000000000: at most"),
            std::string::npos);
  EXPECT_NE(msg("dlrm:tables=9000000000").find("tables=9000000000: at most"), std::string::npos);
  EXPECT_NE(msg("mlp:784,4294967296,10").find("at most"), std::string::npos);
  EXPECT_NO_THROW(plan::parse_model("dlrm:tables=100000,rows=1099511627776"));
}

TEST(PlanModel, LoadsASpecFromAFile) {
  const std::string path = ::testing::TempDir() + "/model.txt";
  std::ofstream(path) << "# a small GPT\n  gpt:layers=2,hidden=64,heads=4,\nseq=16,vocab=50\n";
  const plan::ModelDesc d = plan::load_model(path);
  EXPECT_EQ(d.gpt.layers, 2);
  EXPECT_EQ(d.gpt.seq, 16);
  EXPECT_EQ(plan::load_model("gpt-175b").gpt.hidden, 12288);
  std::ofstream(path) << "gpt:layers=2";
  try {
    plan::load_model(path);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
}

TEST(PlanModel, BlockActivationsCountBraidsStoredTensors) {
  const plan::BlockActivations a = plan::gpt_block_activations({2, 64, 4, 16, 50, 4});
  EXPECT_EQ(a.replicated, 4 * 64);
  EXPECT_EQ(a.sharded, (4 + 2 * 4) * 64);
  EXPECT_EQ(a.scores, 4 * 16);
  EXPECT_EQ(a.input, 64);
}

}  // namespace
