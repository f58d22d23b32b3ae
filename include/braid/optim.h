// Optimizers, gradient clipping and the learning-rate schedule.
//
// Optimizer state is kept per parameter NAME (not per object or position),
// so a checkpoint stores it as named tensors with full shapes and a later
// sharded optimizer (ZeRO) can save only its slice and reload at another
// world size. Each update is one fused pass over the parameter.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "braid/module.h"

namespace braid {
struct Checkpoint;
}

namespace braid::nn {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update of every parameter in `params` with learning rate lr, using
  // p->grad (which the caller has already averaged/clipped). O(Σ sizes).
  virtual void step(const std::vector<Parameter*>& params, float lr) = 0;
  virtual const char* kind() const = 0;
  // Number of step() calls so far (AdamW's bias correction uses it).
  int64_t steps() const { return steps_; }
  // State tensors per parameter, each of its shape: 0 for plain SGD, 1 with
  // momentum, 2 for AdamW (what the optimizer adds to a model's memory).
  size_t state_per_param() const { return slots().size(); }

  // Checkpoint I/O: tensors "optim/<param name>/<slot>" plus the scalar
  // "optim/steps". load_state throws Error(kCorrupt) naming the tensor when
  // a slot is missing or has the wrong shape.
  void save_state(Checkpoint& ck) const;
  void load_state(const Checkpoint& ck, const std::vector<Parameter*>& params);

 protected:
  // State slot `slot` of parameter p, created zeroed at p's shape.
  Tensor& state(const Parameter& p, const char* slot);
  virtual std::vector<const char*> slots() const = 0;
  std::map<std::string, Tensor> state_;  // "<name>/<slot>"
  int64_t steps_ = 0;
};

// SGD with momentum, PyTorch semantics: g' = g + wd·w (when p->decay);
// buf = μ·buf + g'; w −= lr·buf (μ = 0: w −= lr·g').
class Sgd : public Optimizer {
 public:
  Sgd(float momentum = 0.0f, float weight_decay = 0.0f)
      : momentum_(momentum), weight_decay_(weight_decay) {}
  void step(const std::vector<Parameter*>& params, float lr) override;
  const char* kind() const override { return "sgd"; }

 protected:
  std::vector<const char*> slots() const override;

 private:
  float momentum_, weight_decay_;
};

// AdamW, PyTorch semantics: w ·= 1 − lr·wd (when p->decay); m, v moving
// averages; w −= (lr / (1−β1ᵗ)) · m / (√v / √(1−β2ᵗ) + ε).
class AdamW : public Optimizer {
 public:
  AdamW(float beta1 = 0.9f, float beta2 = 0.999f, float eps = 1e-8f, float weight_decay = 0.01f)
      : beta1_(beta1), beta2_(beta2), eps_(eps), weight_decay_(weight_decay) {}
  void step(const std::vector<Parameter*>& params, float lr) override;
  const char* kind() const override { return "adamw"; }

 protected:
  std::vector<const char*> slots() const override;

 private:
  float beta1_, beta2_, eps_, weight_decay_;
};

// The per-element update loops of Sgd and AdamW over n contiguous floats,
// shared with the parameter servers' update rules (src/ps) so that a server
// step is the same arithmetic as an nn step. One pass, vectorised, split
// over threads for large n.
//  sgd_update:   g' = g + wd·w; μ ≠ 0: buf = μ·buf + g', w −= lr·buf;
//                μ = 0: w −= lr·g' (buf is not read and may be null).
//  adamw_update: update count t (1-based; Error(kInvalidArgument) below 1);
//                w ·= 1 − lr·wd; m, v moving averages; bias-corrected step,
//                as AdamW's comment says.
void sgd_update(float* w, const float* g, float* buf, int64_t n, float lr, float momentum,
                float wd);
void adamw_update(float* w, const float* g, float* m, float* v, int64_t n, float lr, int64_t t,
                  float beta1, float beta2, float eps, float wd);

// A piece of gradient for clip_global_norm: n floats at g. `counted` false:
// another piece (on this rank or another) holds the same values and counts
// them (a tensor-parallel replica), so these add nothing to the norm.
struct GradPiece {
  float* g = nullptr;
  int64_t n = 0;
  bool counted = true;
};

// The one gradient-clipping rule of every strategy. The global L2 norm is
// the square root of the counted pieces' sum of squares (in double) after
// `sum_over_ranks` has added the other ranks' sums to it (empty: this
// process holds every piece; a parallel caller passes the all_reduce over
// the groups that hold the rest: stages, tensor shards, ZeRO chunks). When
// the norm exceeds max_norm (> 0) every piece is scaled by
// max_norm / (norm + 1e-6). Returns the norm before clipping, the same on
// every rank that summed.
double clip_global_norm(const std::vector<GradPiece>& pieces, double max_norm,
                        const std::function<void(double&)>& sum_over_ranks = {});
// clip_global_norm over every parameter's whole gradient, in one process.
double clip_grad_norm(const std::vector<Parameter*>& params, double max_norm);

// Linear warmup over `warmup` steps to `base`, then either constant or a
// cosine decay to base·min_ratio at step `total`.
struct LrSchedule {
  float base = 0.01f;
  int64_t warmup = 0;
  int64_t total = 0;       // cosine horizon; ≤ warmup means constant
  float min_ratio = 0.1f;  // floor of the cosine, as a fraction of base
  bool cosine = false;
  float at(int64_t step) const;  // step counts from 0
};

}  // namespace braid::nn
