// braid data click --out FILE — writes the Zipf click data set that
// `braid train dlrm` trains on (nn::ClickData, braid/data.h) to one file, so
// that a program outside braid (bench/torchrec_dlrm.py) trains and tests on
// exactly the same samples. The data flags are train dlrm's, with its
// defaults: the same flags name the same data.
//
// The file is a braid checkpoint (braid/checkpoint.h: named tensors and
// string metadata, checksummed), holding
//   train/x f32 [samples, dense + features·bag], train/y i32 [samples],
//   test/x  f32 [test_samples, …],              test/y i32 [test_samples]:
// row i is sample i of its split as ClickData::gather writes it (the dense
// values, then each feature's ids as exact f32 values; the 0/1 label), and
// meta: the flags' values (dense, features, rows, bag, zipf, samples,
// test_samples, data_seed) and the test split's best_log_loss and
// base_log_loss. Which rows form a training step's batch is the Sampler's
// business (braid/data.h): a function of train's --seed and --batch.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "braid/checkpoint.h"
#include "braid/data.h"
#include "subcommands.h"
#include "train_dlrm.h"

namespace braid::tool {

namespace {

std::string exact(double v) {
  char b[40];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}

// Every sample of `split` into ck as "<split>/x" and "<split>/y".
void add_split(Checkpoint& ck, const nn::ClickData& d, const std::string& split) {
  std::vector<int64_t> all(size_t(d.size()));
  std::iota(all.begin(), all.end(), int64_t(0));
  Tensor& x = ck.tensors[split + "/x"];
  Tensor& y = ck.tensors[split + "/y"];
  d.gather(all.data(), d.size(), x, y);
}

}  // namespace

int data_main(int argc, char** argv) {
  CLI::App app{"braid data: write a data set braid trains on to a file", "braid data"};
  app.require_subcommand(1);
  CLI::App* click = app.add_subcommand(
      "click", "the Zipf click data of braid train dlrm (its data flags and defaults) as a braid "
               "checkpoint: train/x, train/y, test/x, test/y and the flags as meta");
  DlrmFlags f;
  std::string out;
  click->add_option("--out", out, "the file to write")->required();
  add_click_options(*click, f);
  bool quiet = false;
  click->add_flag("-q,--quiet", quiet, "print nothing");
  if (argc < 2) {  // no data set named: list them
    std::fprintf(stderr, "%s", app.help().c_str());
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  const nn::ClickConfig c = click_config(f);
  const nn::ClickData train(c, "train"), test(c, "test");
  Checkpoint ck;
  add_split(ck, train, "train");
  add_split(ck, test, "test");
  ck.meta = {{"dense", std::to_string(c.dense)},
             {"features", std::to_string(c.features)},
             {"rows", std::to_string(c.rows)},
             {"bag", std::to_string(c.bag)},
             {"zipf", exact(c.zipf)},
             {"samples", std::to_string(c.samples)},
             {"test_samples", std::to_string(c.test_samples)},
             {"data_seed", std::to_string(c.seed)},
             {"best_log_loss", exact(test.best_log_loss())},
             {"base_log_loss", exact(test.base_log_loss())}};
  save_checkpoint(out, ck);
  if (!quiet)
    std::printf("wrote %s: %lld train and %lld test samples of width %lld; test log loss floor "
                "%.4f, constant %.4f\n",
                out.c_str(), (long long)train.size(), (long long)test.size(),
                (long long)train.width(), test.best_log_loss(), test.base_log_loss());
  return 0;
}

}  // namespace braid::tool
