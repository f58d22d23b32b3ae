// One pipeline chunk's activation slots. nn::Module keeps the activations
// of the last batch it ran forward (llm.c style: each module owns its
// caches and output buffers), so a stage that has several micro-batches
// between forward and backward needs that many copies of its modules.
// Slot k is copy k of the chunk's modules; every copy's parameters are
// views of copy 0's data and gradients, so there is one set of weights,
// every backward accumulates into the same gradients, and the optimizer
// and gradient reductions see copy 0's parameters only.
//
// A forward takes a free slot; its backward runs in that slot and frees
// it. With fewer slots than the schedule keeps live (the user asked for
// activation recomputation), a forward that finds none free evicts the
// micro-batch whose backward comes last, and that backward runs the
// forward again first.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "braid/module.h"

namespace braid::parallel::pp_detail {

class ActivationSlots {
 public:
  // `backward_at[mb]`: where micro-batch mb's backward stands in this
  // rank's action list (eviction order). `what` names the chunk in errors.
  ActivationSlots(std::string what, std::vector<int> backward_at)
      : what_(std::move(what)), backward_at_(std::move(backward_at)),
        slot_of_(backward_at_.size(), -1) {}

  // Adds a slot over `modules`. The first slot's modules keep their
  // parameters; a later slot's parameters are pointed at the first's,
  // matched in collect_parameters order. Throws Error(kInvalidArgument)
  // naming the first parameter whose name or shape differs.
  void add(std::vector<nn::Module*> modules);
  // Points the parameters of `modules` at the first slot's (as add does)
  // without adding a slot: a copy this chunk does not need.
  void share(const std::vector<nn::Module*>& modules);
  int size() const { return int(slots_.size()); }
  // The model's parameter that `p` (a parameter of any slot's modules)
  // stands for: p itself in the first slot.
  nn::Parameter& model_parameter(nn::Parameter& p) const {
    auto it = model_of_.find(&p);
    return it == model_of_.end() ? p : *it->second;
  }
  const std::vector<nn::Module*>& modules(int slot) const { return slots_[size_t(slot)].modules; }

  // The slot holding mb's activations, or -1.
  int find(int mb) const { return slot_of_[size_t(mb)]; }
  // A slot for mb's forward: a free one, or the one holding the micro-
  // batch whose backward comes last, which loses its activations (that
  // micro-batch is stored in *evicted; -1 when a free slot was taken).
  int take(int mb, int* evicted = nullptr);
  // mb's backward is done: its slot is free again.
  void free(int mb);
  // Every slot free (a new step, or after shape learning).
  void clear();

  // Bytes of the module outputs the slot holds for its micro-batch.
  void set_bytes(int slot, int64_t bytes) { slots_[size_t(slot)].bytes = bytes; }
  // Over the slots in use.
  int64_t bytes_in_use() const;
  int in_use() const;

 private:
  struct Slot {
    std::vector<nn::Module*> modules;
    int mb = -1;  // the micro-batch whose activations it holds
    int64_t bytes = 0;
  };
  std::string what_;
  std::vector<int> backward_at_;
  std::vector<int> slot_of_;  // [micro-batch]
  std::vector<Slot> slots_;
  std::vector<nn::Parameter*> first_params_;
  std::unordered_map<const nn::Parameter*, nn::Parameter*> model_of_;  // copies' parameters
};

}  // namespace braid::parallel::pp_detail
