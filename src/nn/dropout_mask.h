// Internal: dropout's counter-based mask, shared by Dropout and the
// attention core's dropout on the probabilities. Element e of sample s
// under layer key k keeps its value (times 1/(1 − p)) or drops it,
// decided by a hash of (seed, step, s, k, e) alone: the same for a
// sample however the batch is split across ranks and micro-batches, and
// again when a layer is recomputed.
#pragma once

#include <cstdint>

#include "braid/rng.h"

namespace braid::nn {

// The mask of one sample: element e's value is scale = 1/(1 − p) when
// uniform01(counter_hash(seed, step, sample, (key << 40) ^ e)) ≥ p, else 0
// (e < 2^40). counter_hash's first three words are folded once, so an
// element costs one mix instead of four.
class SampleMask {
 public:
  SampleMask(uint64_t seed, uint64_t step, uint64_t sample, uint64_t key, float p)
      : h_(mix64(mix64(mix64(seed) ^ step) ^ sample)), key_(key << 40), p_(p),
        scale_(1.0f / (1.0f - p)) {}
  float operator()(uint64_t e) const {
    return uniform01(mix64(h_ ^ (key_ ^ e))) >= p_ ? scale_ : 0.0f;
  }

 private:
  uint64_t h_, key_;
  float p_, scale_;
};

}  // namespace braid::nn
