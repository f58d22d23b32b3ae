// Hierarchical all-reduce for ranks spread over several hosts.
//
//   1. inside each host, reduce to the host's leader (binomial tree over
//      shared memory);
//   2. the leaders all-reduce among themselves (ring over TCP, the slow
//      links crossed by one rank per host instead of every rank);
//   3. inside each host, the leader broadcasts the result (pipelined chain).
// With H hosts of at most L ranks, s the shared-memory link and t the
// communicator's: ⌈log L⌉(αs + Nβs + Nγ) for the tree, (L − 1 + C)αs + Nβs
// for the chain (C as the ring's), and the leaders' ring as ring.cc prices
// a ring of H (CostInputs::ring_time over t: 2(H−1)αt + 2(H−1)/H·Nβt
// when each step is one chunk, its link's load when pipelined) +
// (H−1)/H·Nγ — the inter-host volume of a ring of H instead of H·L ranks.
// avg is summed throughout and divided once at the end.
#include "comm/algo/hierarchical.h"

#include "braid/reduce.h"
#include "comm/algo/algorithms.h"
#include "comm/algo/registry.h"

namespace braid::comm::algo {

void all_reduce_hier(Context& c, CommImpl& local, CommImpl* leaders, const void* send,
                     void* recv, size_t count) {
  const DType t = c.dtype();
  const size_t bytes = count * c.esize();
  const ReduceOp sum_op = c.rop() == ReduceOp::kAvg ? ReduceOp::kSum : c.rop();
  copy_if_distinct(recv, send, bytes);
  // The steps run the algorithms named here, whatever the inner
  // communicators' selectors would choose (or an override would force).
  Call step;
  step.send = recv;
  step.recv = recv;
  step.count = count;
  step.root = 0;
  step.chunk_bytes = local.chunk_bytes();
  local.launch(get(CollOp::kReduce, AlgoId::kTree), count, t, sum_op, 0, false, step);
  if (leaders) {
    step.chunk_bytes = leaders->chunk_bytes();
    step.root = -1;
    leaders->launch(get(CollOp::kAllReduce, AlgoId::kRing), count, t, sum_op, -1, false, step);
  }
  step.chunk_bytes = local.chunk_bytes();
  step.root = 0;
  local.launch(get(CollOp::kBroadcast, AlgoId::kChain), count, t, ReduceOp::kSum, 0, false,
               step);
  if (c.rop() == ReduceOp::kAvg) scale_avg(recv, count, t, c.size());
}

void add_hierarchical(Table& t) {
  t.push_back({CollOp::kAllReduce, AlgoId::kHier, "hier",
               "tree in each host, ring among the hosts' leaders, chain back: several hosts",
               [](const Fit& f) -> const char* {
                 return f.hosts < 2 ? "needs a host hierarchy (ranks on several hosts, several "
                                      "on some host, BRAID_NO_HIER unset)"
                                    : nullptr;
               },
               [](const CostInputs& m) {
                 const double H = m.hosts, L = m.max_local, N = m.N, g = m.g;
                 const double as = m.as, bs = m.bs;
                 double intra =
                     log2c(m.max_local) * (as + N * bs + N * g) + (L - 1 + m.chunks) * as + N * bs;
                 // The leaders' ring: H ranks, segments of N/H in the comm's chunks.
                 const double CH = std::max(1.0, std::ceil(N / H / m.ring_chunk));
                 double inter = H > 1 ? CostInputs::ring_time(2 * (H - 1), N / H / CH, CH, m.a, m.b,
                                                              m.a, m.b) +
                                            (H - 1) / H * N * g
                                      : 0;
                 return intra + inter;
               },
               [](Context& c, const Call& k) {
                 all_reduce_hier(c, *k.comm->local(), k.comm->leaders(), k.send, k.recv, k.count);
               }});
}

}  // namespace braid::comm::algo
