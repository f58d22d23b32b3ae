#include "braid/rng.h"

#include <cmath>

namespace braid {

float CounterRng::normal() {
  // Box-Muller from two 53-bit uniforms; 1 - u keeps log away from 0.
  double u1 = 1.0 - uniform01_f64(next_u64());
  double u2 = uniform01_f64(next_u64());
  return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

}  // namespace braid
