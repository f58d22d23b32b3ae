// State's waiting, unit walk and parameter wait; see state.h.
#include "parallel/dp/state.h"

#include <algorithm>

#include "parallel/dp/zero_policy.h"

namespace braid::parallel::dp {

void State::wait(Work& w) {
  if (!w.valid()) return;
  waited([&] { w.wait(); });
  w = Work();
}

void State::track(int64_t delta) {
  transient_bytes += delta;
  peak_transient_bytes = std::max(peak_transient_bytes, transient_bytes);
}

size_t State::unit_with_params(int64_t from, int dir) const {
  for (int64_t u = from; u >= 0 && u < int64_t(units.size()); u += dir)
    if (!unit_buckets[size_t(u)].empty()) return size_t(u);
  return kNone;
}

void State::wait_params(Bucket& b) {
  if (!b.params_live && !b.gather_pending) policy->gather_params(b);
  if (b.gather_pending) {
    wait(b.gather_work);
    b.gather_pending = false;
    b.params_live = true;
  }
}

}  // namespace braid::parallel::dp
