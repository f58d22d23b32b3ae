// nn::Trainer — one optimizer step at a time, single process, shaped so
// that data parallelism plugs in through hooks rather than a rewrite.
//
// One step (global batch B, this rank's shard of it, `accum` micro-batches):
//   zero grads
//   for each micro-batch m of this rank's shard:
//     gather → forward → loss (sum) → backward with dL/dlogits scaled by
//     1 / (B · targets_per_sample); on the LAST micro-batch ctx.grad_ready
//     = hooks.grad_ready, so it fires once per parameter per step, in the
//     order gradients become final
//   hooks.reduce_gradients(params)   ← data parallel: SUM across ranks
//                                      (each rank's grads are its share of
//                                      the global mean, so a sum is exact)
//   hooks.reduce_sums(values)        ← SUM of [loss sum, rows, correct]
//   clip by global norm → lr = schedule(step) → optimizer.step
// The logged loss is therefore the mean over the GLOBAL batch. Dropout
// keys use the sample's position in the global batch, so the masks are the
// same at any world size or micro-batch split.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "braid/data.h"
#include "braid/loss.h"
#include "braid/module.h"
#include "braid/optim.h"

namespace braid::nn {

struct TrainOptions {
  int64_t global_batch = 256;  // samples per optimizer step, all ranks together
  int accum = 1;               // micro-batches per rank per step
  double clip = 0.0;           // max global grad norm; 0 = off
  uint64_t seed = 0;           // sampler order and dropout keys
  bool shuffle = true;
  int rank = 0, world = 1;     // this rank's shard of every global batch
};

struct StepStats {
  int64_t step = 0;         // the step just taken (from 0)
  double loss = 0;          // mean over the global batch
  float lr = 0;
  double grad_norm = 0;     // before clipping (0 when not clipping)
  int64_t correct = 0;      // argmax hits over the global batch
  int64_t rows = 0;         // loss rows over the global batch
};

struct EvalStats {
  double loss = 0;          // mean over rows
  double accuracy = 0;      // fraction of rows whose argmax is the target
  int64_t rows = 0;
};

struct TrainerHooks {
  GradReadyHook grad_ready;
  std::function<void(const std::vector<Parameter*>&)> reduce_gradients;
  std::function<void(double* values, int n)> reduce_sums;
};

class Trainer {
 public:
  // The trainer keeps references: model, data and optimizer must outlive it.
  Trainer(Module& model, Dataset& data, Optimizer& opt, LrSchedule schedule, TrainOptions opts);

  TrainerHooks& hooks() { return hooks_; }
  Sampler& sampler() { return sampler_; }
  const std::vector<Parameter*>& parameters() const { return params_; }
  const TrainOptions& options() const { return opts_; }
  int64_t next_step() const { return step_; }
  void set_next_step(int64_t s) { step_ = s; }

  // Runs step next_step() and advances. Throws what the layers throw.
  StepStats step();

  // Mean loss and accuracy of `model` over all of `data` in batches of
  // `batch` (eval mode: no dropout). Local to this process.
  EvalStats evaluate(const Dataset& data, int64_t batch);

  // Model, optimizer state, step and seed (the RNG is counter-based, so
  // (seed, step) is its whole state). load throws kCorrupt on a mismatch.
  void save(const std::string& path);
  void load(const std::string& path);

 private:
  Module& model_;
  Dataset& data_;
  Optimizer& opt_;
  LrSchedule schedule_;
  TrainOptions opts_;
  Sampler sampler_;
  TrainerHooks hooks_;
  std::vector<Parameter*> params_;
  SoftmaxCrossEntropy loss_;
  int64_t step_ = 0;
  std::vector<int64_t> shard_;
  Tensor x_, y_;
};

}  // namespace braid::nn
