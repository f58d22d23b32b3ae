// braid train dlrm: the DLRM-like model on synthetic Zipf click data
// (include/braid/dlrm.h, ClickData in include/braid/data.h). Serial and
// --dp runs share this through train_setup.h; the embedding tables'
// dense gradients go through data parallelism like any parameter.
#include "train_dlrm.h"

#include <cstdio>

#include "braid/dlrm.h"
#include "braid/error.h"

namespace braid::tool {

void add_click_options(CLI::App& app, DlrmFlags& f) {
  app.add_option("--features", f.features, "dlrm: categorical features, one table each (8)");
  app.add_option("--rows", f.rows, "dlrm: rows of every table = each feature's cardinality (1000)");
  app.add_option("--dense", f.dense, "dlrm: dense features (4)");
  app.add_option("--bag", f.bag, "dlrm: ids per feature per sample (1)");
  app.add_option("--zipf", f.zipf, "dlrm: Zipf exponent of feature popularity (1.1)");
  app.add_option("--samples", f.samples, "dlrm: training samples (262144)");
  app.add_option("--test-samples", f.test_samples, "dlrm: test samples (16384)");
  app.add_option("--data-seed", f.data_seed, "dlrm: seed of the click data and its teacher (1)");
}

void add_dlrm_options(CLI::App& app, DlrmFlags& f) {
  add_click_options(app, f);
  app.add_option("--dim", f.dim, "dlrm: embedding width (16)");
  app.add_option("--interaction", f.interaction, "dlrm: dot (pairwise dot products) or cat")
      ->check(CLI::IsMember({"dot", "cat"}));
  app.add_option("--embeddings", f.embeddings,
                 "dlrm: replicated (every rank holds every table) or sharded (tables split over "
                 "the --dp ranks, MLPs data parallel)")
      ->check(CLI::IsMember({"replicated", "sharded"}));
  app.add_option("--shard", f.shard,
                 "dlrm, sharded: table, row, column or auto (per table by size and cost; prints "
                 "its plan) (auto)")
      ->check(CLI::IsMember({"table", "row", "column", "auto"}));
  app.add_option("--table-optimizer", f.table_optimizer,
                 "dlrm: row-wise optimizer of the tables' touched rows, sgd or adagrad (given, "
                 "or with --embeddings sharded; else the tables train with --optimizer)")
      ->check(CLI::IsMember({"sgd", "adagrad"}));
  app.add_option("--table-memory-limit", f.table_memory_limit_mib,
                 "dlrm, sharded: MiB of tables (and row state) one rank may hold; a plan over it "
                 "is refused");
}

nn::ClickConfig click_config(const DlrmFlags& f) {
  nn::ClickConfig c;
  c.features = f.features;
  c.rows = f.rows;
  c.dense = f.dense;
  c.bag = f.bag;
  c.zipf = f.zipf;
  c.samples = f.samples;
  c.test_samples = f.test_samples;
  c.seed = f.data_seed;
  return c;
}

nn::DlrmConfig dlrm_model_config(const DlrmFlags& f) {
  nn::DlrmConfig m = nn::dlrm_config_for(click_config(f), f.dim);
  using Interaction = nn::DlrmConfig::Interaction;
  m.interaction = f.interaction == "cat" ? Interaction::kCat : Interaction::kDot;
  return m;
}

DlrmSetup build_dlrm(const DlrmFlags& f) {
  const nn::ClickConfig c = click_config(f);
  DlrmSetup s;
  s.train = std::make_unique<nn::ClickData>(c, "train");
  s.test = std::make_unique<nn::ClickData>(c, "test");
  s.loss = std::make_unique<nn::BinaryCrossEntropyWithLogits>();
  return s;
}

std::string dlrm_summary(const nn::Dataset& test, const nn::EvalStats& ev, nlohmann::json& done) {
  const auto* clicks = dynamic_cast<const nn::ClickData*>(&test);
  BRAID_CHECK_ARG(clicks != nullptr, "dlrm summary: the test set is not click data");
  const double floor = clicks->best_log_loss();
  done.update({{"test_log_loss", ev.loss},
               {"best_log_loss", floor},
               {"gap_to_floor", ev.loss - floor},
               {"base_log_loss", clicks->base_log_loss()},
               {"test_accuracy", ev.accuracy}});
  char b[160];
  std::snprintf(b, sizeof b, ", test log loss %.4f (floor %.4f, +%.4f; constant %.4f)", ev.loss,
                floor, ev.loss - floor, clicks->base_log_loss());
  return b;
}

}  // namespace braid::tool
