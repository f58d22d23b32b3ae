// Per-server load of a `braid ps train` run, read from the servers'
// counters (ps::ServerStats) by the logging worker after each step: the
// step record's rates since the previous step, and the done record's two
// windows split at the step where hot sets are (or, without --hot-keys,
// would be) first refreshed, so that runs with and without hot keys, and
// the load before and after the refresh, compare directly.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "braid/ps.h"

namespace braid::tool {

class LoadMeter {
 public:
  // `split`: the first step of the "after" window.
  explicit LoadMeter(int64_t split) : split_(split) {}
  // After step `step` at `t` seconds: per server requests/s and bytes/s
  // since the previous sample, as step-record fields.
  nlohmann::json sample(int64_t step, double t, const std::vector<ps::ServerStats>& all);
  // {"split_step", "before": W, "after": W}, W per server: requests_per_s,
  // bytes_per_s, pulls_owner, pulls_replica over the window (a window with
  // no steps is null).
  nlohmann::json windows() const;

 private:
  struct Point {
    double t = 0;
    std::vector<ps::ServerStats> s;
  };
  static nlohmann::json window(const Point& a, const Point& b);
  int64_t split_;
  bool have_first_ = false, have_split_ = false;
  Point first_, at_split_, last_;
};

}  // namespace braid::tool
