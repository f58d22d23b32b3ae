// Pipelined chain broadcast for large messages.
//
// Ranks form a line from the root: root → root+1 → … → root+n−1. The buffer
// is cut into C chunks; each rank forwards chunk k to its successor as soon
// as chunk k has arrived, so all links carry data at once.
// Cost: (n − 2 + C)·(α + (N/C)β) ≈ Nβ + (n−2)·(N/C)β for large N — close to
// a single transfer, independent of n, where a tree pays ⌈log n⌉·Nβ. The
// model takes C = max(1, ⌈N / 256 KiB⌉); when ranks outnumber cores, at
// least the work over the cores: (n−1)(2Cα + Nβ) (CostInputs::shared).
#include "comm/algo/algorithms.h"
#include "comm/algo/registry.h"

namespace braid::comm::algo {

void broadcast_chain(Context& c, void* buf, size_t count, int root, size_t chunk_bytes) {
  const int n = c.size(), r = c.rank();
  if (n == 1) return;
  const size_t es = c.esize();
  auto* b = static_cast<uint8_t*>(buf);
  const int v = (r - root + n) % n;
  const int prev = (r - 1 + n) % n, next = (r + 1) % n;
  const bool last = v == n - 1;
  const int C = chunk_count(count, es, chunk_bytes);
  // Chunk k: elements [block_offset(count, C, k), block_offset(count, C, k + 1)).
  auto send_chunk = [&](int k) {
    size_t lo = block_offset(count, C, k), hi = block_offset(count, C, k + 1);
    c.send(next, b + lo * es, (hi - lo) * es, uint32_t(k));
  };
  if (v == 0) {
    for (int k = 0; k < C; ++k) send_chunk(k);
    c.wait_all();
    return;
  }
  std::vector<Request*> rq(C);
  for (int k = 0; k < C; ++k) {
    size_t lo = block_offset(count, C, k), hi = block_offset(count, C, k + 1);
    rq[k] = c.recv(prev, b + lo * es, (hi - lo) * es, uint32_t(k));
  }
  complete_in_order(c, rq, [&](size_t k) {
    if (!last) send_chunk(int(k));
  });
  c.wait_all();
}

void add_chain(Table& t) {
  t.push_back({CollOp::kBroadcast, AlgoId::kChain, "chain",
               "pipelined line from the root: large buffers", always,
               [](const CostInputs& m) {
                 const double C = std::max(1.0, std::ceil(m.N / m.chunk));
                 return m.shared((m.n - 2 + C) * (m.a + m.N / C * m.b),
                                 (m.n - 1) * (C * m.aw + m.N * m.b));
               },
               [](Context& c, const Call& k) {
                 broadcast_chain(c, k.recv, k.count, k.root, k.chunk_bytes);
               }});
}

}  // namespace braid::comm::algo
