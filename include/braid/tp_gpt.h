// tp::TpGpt: nn::make_gpt's model split across a tensor-parallel group, built
// whole or as some of its top-level modules (a pipeline stage's), and the
// GPT's module numbering and costs that pipelines cut stages by.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "braid/models.h"
#include "braid/tp_layers.h"

namespace braid::parallel::tp {

// A range [begin, end) of the GPT's top-level modules, numbered as
// nn::make_gpt's children: 0 emb, 1 … L the blocks h.0 … h.{L−1}, L + 1
// ln_f, L + 2 lm_head (gpt_module_count(cfg) = L + 3 in all).
struct ModuleRange {
  size_t begin = 0, end = 0;
};
size_t gpt_module_count(const nn::GptConfig& cfg);
// The relative cost of each of those modules (gpt_module_count entries):
// multiply-adds per token of its forward, which its backward repeats about
// twice over, so the ratios hold for forward + backward. A block:
// 12·d² (QKV, output projection, a 4·d MLP) + 2·T·d (scores and their
// weighted sum); lm_head d·V; the embedding and ln_f a few per feature.
// What a pipeline cuts its stages by when nothing was measured: by count,
// the embedding and ln_f would weigh as much as a block.
std::vector<double> gpt_module_costs(const nn::GptConfig& cfg);

struct TpGptOptions {
  bool sequence_parallel = false;
  // The top-level modules this rank builds (a pipeline stage's, or an
  // interleaved schedule's chunks); empty: all of them. Modules outside
  // the ranges are never allocated.
  std::vector<ModuleRange> modules;
  // false: skip the serial model's values and leave each parameter as its
  // layer's constructor made it, so building costs only the modules' own
  // buffers. For a copy whose parameters are then pointed at another
  // TpGpt's (a pipeline's activation slots) or whose values do not matter
  // (timing a layer).
  bool initialise = true;
};

// nn::make_gpt's model split across a tp group. Input: i32 tokens [B, T];
// output: this rank's block of the logits [B, T, V/n] (for
// VocabParallelCrossEntropy). Parameters are the serial model's for the
// same seed, sliced: the constructor builds the serial GPT once, keeps
// this rank's shards of the modules it builds and frees it (memory: one
// full model, briefly; none with TpGptOptions::initialise false). Throws Error(kInvalidArgument) naming heads, vocab
// or dim when one does not divide by the group's size, or a module range
// outside the model; with sequence parallelism forward throws when T does
// not divide.
class TpGpt : public nn::Module {
 public:
  TpGpt(const nn::GptConfig& cfg, uint64_t seed, std::shared_ptr<Communicator> tp,
        TpGptOptions opts = {});
  ~TpGpt() override;
  // The whole model: Error(kInvalidArgument) when this TpGpt holds only
  // some modules (run those through a pipeline: module()).
  const Tensor& forward(const Tensor& tokens, nn::Context& ctx) override;
  const Tensor& backward(const Tensor& dlogits, nn::Context& ctx) override;
  void collect_parameters(std::vector<nn::Parameter*>& out) override;
  void release_activations() override;
  // Top-level module i (see ModuleRange), or Error(kInvalidArgument) when
  // it was not built here.
  nn::Module& module(size_t i) const;
  bool has_module(size_t i) const { return i < units_.size() && units_[i] != nullptr; }
  size_t module_count() const { return units_.size(); }
  // Every parameter this rank holds with its split, in parameters() order.
  const std::vector<Sharded>& shards() const { return shards_; }
  const std::shared_ptr<Communicator>& tp() const { return tp_; }
  // How many times this process has built the serial GPT to initialise a
  // TpGpt (one per TpGpt constructed with initialise true).
  static int64_t serial_builds();

 private:
  std::shared_ptr<Communicator> tp_;
  TpGptOptions opts_;
  std::vector<std::unique_ptr<nn::Module>> units_;  // [module index]; null: not built here
  std::vector<Sharded> shards_;
};

}  // namespace braid::parallel::tp
