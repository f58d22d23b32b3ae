// Binomial trees: broadcast and reduce.
//
// Virtual rank v = (r − root) mod n, so the root is v = 0.
// Broadcast: v receives from v − lowbit(v) (its parent), then sends to
//   v + m for every power of two m below lowbit(v) (largest first) with
//   v + m < n. ⌈log n⌉ rounds. Cost: ⌈log n⌉·(α + Nβ) — best for small N.
// Reduce: the mirror image. For m = 1, 2, 4, …: if v has bit m set it sends
//   its partial result to v − m and stops; otherwise it receives from v + m
//   (if it exists) and reduces into its partial. Cost: ⌈log n⌉·(α + Nβ + Nγ).
// When ranks outnumber cores, a tree costs at least its work over the
// cores (CostInputs::shared): n − 1 messages in all, each 2α of hand-off:
// (n−1)(2α + Nβ) for broadcast, (n−1)(2α + N(β + γ)) for reduce. Chains
// and rings send n − 1 messages per chunk, so there trees win.
#include <cstring>

#include "comm/algo/algorithms.h"
#include "comm/algo/registry.h"

namespace braid::comm::algo {

void broadcast_tree(Context& c, void* buf, size_t count, int root) {
  const int n = c.size(), r = c.rank();
  if (n == 1) return;
  const size_t bytes = count * c.esize();
  const int v = (r - root + n) % n;
  int mask = 1;
  while (mask < n) {
    if (v & mask) {
      int parent = (v - mask + root) % n;
      c.wait(c.recv(parent, buf, bytes, uint32_t(mask)));
      break;
    }
    mask <<= 1;
  }
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (v + mask < n) c.send((v + mask + root) % n, buf, bytes, uint32_t(mask));
  }
  c.wait_all();
}

void reduce_tree(Context& c, const void* send, void* recv, size_t count, int root) {
  const int n = c.size(), r = c.rank();
  const size_t es = c.esize();
  void* acc = r == root ? recv : c.scratch(count * es);
  copy_if_distinct(acc, send, count * es);
  const int v = (r - root + n) % n;
  for (int mask = 1; mask < n; mask <<= 1) {
    if (v & mask) {
      c.send((v - mask + root) % n, acc, count * es, uint32_t(mask));
      break;
    }
    if (v + mask < n) c.wait(c.recv_reduce((v + mask + root) % n, acc, acc, count, uint32_t(mask)));
  }
  if (r == root) finish_avg(c, acc, count);
  c.wait_all();
}

void add_tree(Table& t) {
  t.push_back({CollOp::kBroadcast, AlgoId::kTree, "tree",
               "binomial tree: small buffers, or ranks outnumbering cores", always,
               [](const CostInputs& m) {
                 return m.shared(log2c(int(m.n)) * (m.a + m.N * m.b),
                                 (m.n - 1) * (m.aw + m.N * m.b));
               },
               [](Context& c, const Call& k) { broadcast_tree(c, k.recv, k.count, k.root); }});
  t.push_back({CollOp::kReduce, AlgoId::kTree, "tree",
               "binomial tree: small buffers, or ranks outnumbering cores", always,
               [](const CostInputs& m) {
                 return m.shared(log2c(int(m.n)) * (m.a + m.N * m.b + m.N * m.g),
                                 (m.n - 1) * (m.aw + m.N * (m.b + m.g)));
               },
               [](Context& c, const Call& k) {
                 reduce_tree(c, k.send, k.recv, k.count, k.root);
               }});
}

}  // namespace braid::comm::algo
