// Server-side update rules over one contiguous run of floats. Private to
// src/ps; the formulas are in include/braid/ps.h (UpdateRule) and equal
// braid::nn's Sgd and AdamW element for element (same operation order), so
// a BSP round equals a data-parallel optimizer step.
#pragma once

#include <cstdint>

#include "braid/ps.h"

namespace braid::ps {

// Applies `rule` to n elements: w the values, g the gradient, `state` the
// rule's slots (slot i of element j at state[i·n + j]), `t` the 1-based
// update count (AdamW's bias correction), `decay` whether wd applies.
void apply_update(const UpdateRule& rule, float* w, const float* g, float* state, int64_t n,
                  float lr, int64_t t, bool decay);

}  // namespace braid::ps
