// What the micro-benchmarks that time braid's own kernels share: their
// arguments, [threads] [rows] [d_model] (2 4096 512), and their clock,
// the median of 15 timed runs after one untimed run.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "braid/threads.h"

struct KernelShape {
  int threads;
  int64_t rows, d;
};

// Reads the arguments and sets braid's thread count to the first.
inline KernelShape kernel_shape(int argc, char** argv) {
  KernelShape k{argc > 1 ? std::atoi(argv[1]) : 2, argc > 2 ? std::atoll(argv[2]) : 4096,
                argc > 3 ? std::atoll(argv[3]) : 512};
  braid::set_num_threads(k.threads);
  return k;
}

template <class F>
double median_ms(F&& f) {
  f();
  std::vector<double> t;
  for (int i = 0; i < 15; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}
