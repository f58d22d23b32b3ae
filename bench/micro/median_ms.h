// The median of 15 timed runs of f, in ms, after one untimed run: the
// clock of the micro-benchmarks that time braid's own kernels.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

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
