// nn::LossScaler — dynamic loss scaling for fp16 training.
//
// fp16's largest finite value is 65504 and its smallest normal 6e-5, so
// small gradients underflow to zero unless the loss is scaled up before
// backward; too large a scale overflows to inf. The scaler keeps a scale S
// (a power of two, so multiplying by it and by 1/S is exact): backward runs
// on S·loss, and after the gradients are reduced the step looks at their
// global norm (which is S times the true norm):
//   - not finite (an inf or NaN anywhere, on any rank): the step is
//     skipped (no update, the optimizer's step count does not move), S is
//     halved (not below min_scale);
//   - finite: the gradients are divided by S and the step is taken; after
//     `growth_interval` finite steps in a row S doubles (not above
//     max_scale).
// This is the schedule of Megatron-LM's DynamicGradScaler and DeepSpeed's
// DynamicLossScaler (hysteresis 1). nn::Trainer runs it when
// TrainOptions::loss_scaling is set (braid train --precision fp16); every
// layout reaches the same decision, since the norm is the global one.
#pragma once

#include <cstdint>

namespace braid::nn {

struct LossScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double min_scale = 1.0;
  double max_scale = 16777216.0;  // 2^24
  int64_t growth_interval = 1000;
};

class LossScaler {
 public:
  // Throws Error(kInvalidArgument) unless 0 < min ≤ init ≤ max and the
  // interval is ≥ 1.
  explicit LossScaler(LossScalerOptions o = {});
  double scale() const { return scale_; }
  // The outcome of a step whose scaled gradients have global norm
  // `scaled_norm`: true (take the step) when it is finite; updates the
  // scale as the file comment says.
  bool update(double scaled_norm);
  int64_t skipped() const { return skipped_; }    // steps skipped so far
  int64_t good_run() const { return good_run_; }  // finite steps since the last change
  // Restores a saved scale and run (a checkpoint's); same bounds checked.
  void restore(double scale, int64_t good_run);

 private:
  LossScalerOptions o_;
  double scale_;
  int64_t good_run_ = 0, skipped_ = 0;
};

}  // namespace braid::nn
