// Dynamic loss scaling: halve on overflow, double after a clean run.
#include "braid/loss_scaler.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "braid/error.h"

namespace braid::nn {

LossScaler::LossScaler(LossScalerOptions o) : o_(o), scale_(o.init_scale) {
  BRAID_CHECK_ARG(o.min_scale > 0 && o.min_scale <= o.init_scale && o.init_scale <= o.max_scale,
                  "loss scaler: need 0 < min_scale <= init_scale <= max_scale, got " +
                      std::to_string(o.min_scale) + ", " + std::to_string(o.init_scale) + ", " +
                      std::to_string(o.max_scale));
  BRAID_CHECK_ARG(o.growth_interval >= 1, "loss scaler: growth_interval must be >= 1, got " +
                                              std::to_string(o.growth_interval));
}

bool LossScaler::update(double scaled_norm) {
  if (!std::isfinite(scaled_norm)) {
    scale_ = std::max(o_.min_scale, scale_ / 2);
    good_run_ = 0;
    ++skipped_;
    return false;
  }
  if (++good_run_ >= o_.growth_interval) {
    scale_ = std::min(o_.max_scale, scale_ * 2);
    good_run_ = 0;
  }
  return true;
}

void LossScaler::restore(double scale, int64_t good_run) {
  BRAID_CHECK_ARG(scale >= o_.min_scale && scale <= o_.max_scale && good_run >= 0,
                  "loss scaler: restored scale " + std::to_string(scale) + " outside [" +
                      std::to_string(o_.min_scale) + ", " + std::to_string(o_.max_scale) + "]");
  scale_ = scale;
  good_run_ = good_run;
}

}  // namespace braid::nn
