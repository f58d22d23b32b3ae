// What `braid train` and `braid train --dp` share: the model-specific
// defaults and the construction of data sets and model from the flags.
// Templates over the two commands' flag structs (same field names).
#pragma once

#include <memory>
#include <string>

#include "braid/checkpoint.h"
#include "braid/data.h"
#include "braid/models.h"
#include "braid/module.h"

namespace braid::tool {

// Fills in what depends on the model: batch, lr, optimizer, weight decay.
template <class Flags>
void apply_model_defaults(Flags& f) {
  const bool mlp = f.model == "mlp";
  if (f.batch <= 0) f.batch = mlp ? 256 : 16;
  if (f.lr < 0) f.lr = mlp ? 0.05 : 1e-3;
  if (f.optimizer.empty()) f.optimizer = mlp ? "sgd" : "adamw";
  if (f.weight_decay < 0) f.weight_decay = f.optimizer == "adamw" ? 0.01 : 0.0;
}

struct TrainSetup {
  std::unique_ptr<nn::Dataset> train, test;  // test: mlp only
  std::unique_ptr<nn::Sequential> model;
};

// Data sets and a freshly initialised model (seeded), then --init-from
// loads weights and --save-init writes them (when `write_init`).
template <class Flags>
TrainSetup build_setup(const Flags& f, bool write_init) {
  TrainSetup s;
  if (f.model == "mlp") {
    std::string dir = f.data_dir.empty() ? nn::FashionMnist::default_dir() : f.data_dir;
    s.train = std::make_unique<nn::FashionMnist>("train", dir);
    s.test = std::make_unique<nn::FashionMnist>("test", dir);
    s.model = nn::make_mlp({784, 512, 512, 10}, f.seed);
  } else {
    std::string path = f.data.empty() ? nn::ByteText::default_path() : f.data;
    s.train = std::make_unique<nn::ByteText>(path, f.context);
    nn::GptConfig c;
    c.layers = f.layers;
    c.dim = f.d_model;
    c.heads = f.heads;
    c.context = f.context;
    c.dropout = f.dropout;
    c.recompute = f.recompute;
    s.model = nn::make_gpt(c, f.seed);
  }
  auto params = s.model->parameters();
  if (!f.init_from.empty()) load_parameters(load_checkpoint(f.init_from), params);
  if (!f.save_init.empty() && write_init) {
    Checkpoint ck;
    add_parameters(ck, params);
    ck.meta["seed"] = std::to_string(f.seed);
    save_checkpoint(f.save_init, ck);
  }
  return s;
}

}  // namespace braid::tool
