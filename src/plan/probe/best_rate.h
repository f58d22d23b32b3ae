// How the device probes time a piece of work: repeated for at least
// `min_s` seconds a run, four runs, the first a warm-up; the fastest of
// the other three, in pieces a second. The fastest, because other work on
// the machine only ever slows a run down.
#pragma once

#include <algorithm>

#include "braid/env.h"

namespace braid::plan {

template <class Work>
double best_rate(double min_s, const Work& once) {
  double best = 0;
  for (int run = 0; run <= 3; ++run) {
    int reps = 0;
    const double t0 = wall_s();
    double t = 0;
    do {
      once();
      ++reps;
      t = wall_s() - t0;
    } while (t < min_s);
    if (run > 0) best = std::max(best, reps / t);
  }
  return best;
}

}  // namespace braid::plan
