// Hierarchical all-reduce for ranks spread over several hosts.
//
//   1. inside each host, reduce to the host's leader (binomial tree over
//      shared memory);
//   2. the leaders all-reduce among themselves (ring over TCP, the slow
//      links crossed by one rank per host instead of every rank);
//   3. inside each host, the leader broadcasts the result (pipelined chain).
// With H hosts of L ranks: ⌈log L⌉(αs + Nβs + Nγ) + 2(H−1)αt +
// 2(H−1)/H·Nβt + (H−1)/H·Nγ + Nβs — the inter-host volume of a ring of H
// instead of H·L ranks. avg is summed throughout and divided once at the end.
#include "comm/algo/hierarchical.h"

#include "braid/reduce.h"
#include "comm/algo/algorithms.h"

namespace braid::comm::algo {

void all_reduce_hier(Context& c, CommImpl& local, CommImpl* leaders, const void* send,
                     void* recv, size_t count) {
  const DType t = c.dtype();
  const size_t bytes = count * c.esize();
  const ReduceOp sum_op = c.rop() == ReduceOp::kAvg ? ReduceOp::kSum : c.rop();
  copy_if_distinct(recv, send, bytes);
  const size_t chunk = local.chunk_bytes();
  local.launch(CollOp::kReduce, count, t, sum_op, 0, bytes, false,
               [&](Context& lc, const std::string&) { reduce_tree(lc, recv, recv, count, 0); });
  if (leaders) {
    const size_t lchunk = leaders->chunk_bytes();
    leaders->launch(CollOp::kAllReduce, count, t, sum_op, -1, bytes, false,
                    [&](Context& xc, const std::string&) {
                      all_reduce_ring(xc, recv, recv, count, lchunk);
                    });
  }
  local.launch(CollOp::kBroadcast, count, t, ReduceOp::kSum, 0, bytes, false,
               [&](Context& lc, const std::string&) {
                 broadcast_chain(lc, recv, count, 0, chunk);
               });
  if (c.rop() == ReduceOp::kAvg) scale_avg(recv, count, t, c.size());
}

}  // namespace braid::comm::algo
