// Dissemination barrier.
//
// Round k (distance d = 2^k): send an empty message to r + d and receive one
// from r − d. After ⌈log n⌉ rounds every rank has heard, directly or through
// others, from every rank. Cost: ⌈log n⌉·α.
#include "comm/algo/algorithms.h"
#include "comm/algo/registry.h"

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

void add_barrier(Table& t) {
  t.push_back({CollOp::kBarrier, AlgoId::kDissemination, "dissemination",
               "⌈log n⌉ rounds of empty messages", always,
               [](const CostInputs& m) { return log2c(int(m.n)) * m.a; },
               [](Context& c, const Call&) { barrier_dissemination(c); }});
}

}  // namespace braid::comm::algo
