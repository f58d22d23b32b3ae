// Dissemination barrier.
//
// Round k (distance d = 2^k): send an empty message to r + d and receive one
// from r − d. After ⌈log n⌉ rounds every rank has heard, directly or through
// others, from every rank. Cost: ⌈log n⌉·α.
#include "comm/algo/algorithms.h"

namespace braid::comm::algo {

void barrier_dissemination(Context& c) {
  const int n = c.size(), r = c.rank();
  uint32_t step = 0;
  for (int d = 1; d < n; d <<= 1, ++step) {
    c.send((r + d) % n, nullptr, 0, step);
    c.recv((r - d + n) % n, nullptr, 0, step);
    c.wait_all();
  }
}

}  // namespace braid::comm::algo
