// What `braid train dlrm` adds to `braid train`: the workload's flags, the
// click data and model they describe, and the done record's log losses.
// train_setup.h calls these where it branches on the model.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "braid/data.h"
#include "braid/dlrm.h"
#include "braid/loss.h"
#include "braid/module.h"
#include "braid/trainer.h"

namespace braid::tool {

struct DlrmFlags {
  int64_t features = 8, rows = 1000, dim = 16, dense = 4, bag = 1;
  int64_t samples = 262144, test_samples = 16384;
  double zipf = 1.1;
  uint64_t data_seed = 1;
  std::string interaction = "dot";
  // Tables sharded over the ranks and row-wise table optimizers
  // (train_hybrid.cc takes any run that names one of these).
  std::string embeddings = "replicated", shard = "auto", table_optimizer = "sgd";
  double table_memory_limit_mib = 0;
};

// The click data's flags (--features, --rows, --dense, --bag, --zipf,
// --samples, --test-samples, --data-seed); add_dlrm_options adds them and
// the model's.
void add_click_options(CLI::App& app, DlrmFlags& f);
void add_dlrm_options(CLI::App& app, DlrmFlags& f);
// The click data set the flags name.
nn::ClickConfig click_config(const DlrmFlags& f);

// The train and test click data and the loss, binary cross-entropy with
// logits.
struct DlrmSetup {
  std::unique_ptr<nn::Dataset> train, test;
  std::unique_ptr<nn::Loss> loss;
};
DlrmSetup build_dlrm(const DlrmFlags& f);
// The model the flags describe (its tables sized by the click data's).
nn::DlrmConfig dlrm_model_config(const DlrmFlags& f);

// Adds test_log_loss, best_log_loss (the test split's entropy floor),
// gap_to_floor, base_log_loss and test_accuracy to `done`; returns the
// words for the done line (", test log loss … (floor …)").
std::string dlrm_summary(const nn::Dataset& test, const nn::EvalStats& ev, nlohmann::json& done);

}  // namespace braid::tool
