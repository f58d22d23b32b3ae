// Direct (pairwise) algorithms: every rank talks to every other at once.
//
// gather / scatter: the root posts n−1 receives (sends); the others one
//   send (receive). Cost at the root: (n−1)α + (n−1)/n·Nβ (N = total).
// all-to-all(v): every rank posts its n−1 sends and n−1 receives together;
//   the transports move them concurrently. Cost: (n−1)α + (n−1)/n·Nβ.
//   In place (send == recv) the input is first copied to scratch: + Nβ
//   of local copy and N bytes of scratch (not priced).
// send / recv: one message, α + Nβ.
// all-gather (small): every rank sends its block to all others at once.
//   Priced ½(n−1)α + 1.3·(n−1)/n·Nβ (N = the whole output): the n−1
//   messages overlap, and the concurrent streams share the memory bus.
// Reduce-scatter / all-reduce / reduce ("direct"): rank j owns block j;
//   every rank sends block j of its input to rank j; the owner folds the n
//   contributions in rank order 0, 1, …, n−1 with one reduce_many (f32
//   accumulation for f16/bf16). The result depends only on rank order — not
//   on the algorithm, chunking or message size — which is what
//   BRAID_DETERMINISTIC=1 promises. All-reduce then ring-gathers the blocks.
//   Cost: (n−1)α + (n−1)/n·Nβ + (n−1)/n·Nγ for the reduce-scatter part, the
//   same wire volume as the ring, with (n−1)/n·N bytes of scratch.
//   The model prices them (the factors as for the all-gather, and 1.2γ for
//   folding n inputs at once):
//     reduce-scatter ½(n−1)α + (n−1)/n·N(1.3β + γ) (N = the whole input);
//     all-reduce 2(n−1)α + 2(n−1)/n·Nβ + 1.2·(n−1)/n·Nγ;
//     reduce (n−1)(α + Nβ) + (n−1)·Nγ, all of it at the root.
// One-shot all-reduce ("oneshot", small buffers): every rank sends its whole
//   input to every other rank at once and folds the n copies in rank order
//   with one reduce_many, so its result is the direct algorithm's, bit for
//   bit. One step instead of recursive doubling's log2 n: when ranks
//   outnumber cores each step costs a wake-up, and small sends land in the
//   peers' fast boxes whether or not the peers are running.
//   (n−1)·N bytes of scratch. Cost, as fitted (see add_direct):
//   α(1 + (n−2)/4) + 3(n−1)·N(β + γ); not chosen by cost at 2 ranks (rd
//   is the same exchange without a staging copy) nor over TCP.
#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "braid/error.h"
#include "braid/reduce.h"
#include "comm/algo/algorithms.h"
#include "comm/algo/registry.h"

namespace braid::comm::algo {

void gather_direct(Context& c, const void* send, void* recv, size_t count, int root) {
  const int n = c.size(), r = c.rank();
  const size_t bytes = count * c.esize();
  if (r == root) {
    auto* out = static_cast<uint8_t*>(recv);
    const size_t out_bytes = size_t(n) * bytes;
    for (int j = 0; j < n; ++j)
      if (j != r) c.recv_final(j, out + size_t(j) * bytes, bytes, out_bytes);
    copy_final_if_distinct(out + size_t(r) * bytes, send, bytes, out_bytes);
  } else {
    c.send(root, send, bytes);
  }
  c.wait_all();
}

void scatter_direct(Context& c, const void* send, void* recv, size_t count, int root) {
  const int n = c.size(), r = c.rank();
  const size_t bytes = count * c.esize();
  if (r == root) {
    auto* in = static_cast<const uint8_t*>(send);
    for (int j = 0; j < n; ++j)
      if (j != r) c.send(j, in + size_t(j) * bytes, bytes);
    copy_final_if_distinct(recv, in + size_t(r) * bytes, bytes, bytes);
  } else {
    c.recv_final(root, recv, bytes, bytes);
  }
  c.wait_all();
}

void all_to_all_v_direct(Context& c, const void* send, const std::vector<size_t>& sc,
                         const std::vector<size_t>& sd, void* recv,
                         const std::vector<size_t>& rc, const std::vector<size_t>& rd) {
  const int n = c.size(), r = c.rank();
  const size_t es = c.esize();
  auto* in = static_cast<const uint8_t*>(send);
  auto* out = static_cast<uint8_t*>(recv);
  size_t out_bytes = 0;
  for (int j = 0; j < n; ++j) out_bytes += rc[j] * es;
  if (send == recv && n > 1) {
    // In place (MPI_IN_PLACE): every block is read before any is written,
    // so the input is staged once; received blocks land where they belong.
    size_t in_bytes = 0;
    for (int j = 0; j < n; ++j) in_bytes = std::max(in_bytes, (sd[j] + sc[j]) * es);
    auto* staged = static_cast<uint8_t*>(c.scratch(in_bytes));
    if (in_bytes) std::memcpy(staged, in, in_bytes);  // nothing to send: in may be null
    in = staged;
  }
  // Stagger partners (r+k, r−k) so that no rank is everyone's first target.
  for (int k = 1; k < n; ++k) {
    int to = (r + k) % n, from = (r - k + n) % n;
    c.recv_final(from, out + rd[from] * es, rc[from] * es, out_bytes);
    c.send(to, in + sd[to] * es, sc[to] * es);
  }
  c.poll();  // first pieces out before the local copy
  if (sc[r] != rc[r])
    throw Error(Errc::kMismatch, "rank " + std::to_string(r) + ": all_to_all_v sends " +
                                     std::to_string(sc[r]) + " elements to itself but expects " +
                                     std::to_string(rc[r]));
  copy_final_if_distinct(out + rd[r] * es, in + sd[r] * es, sc[r] * es, out_bytes);
  c.wait_all();
}

void all_gather_direct(Context& c, const void* send, void* recv, size_t count) {
  const int n = c.size(), r = c.rank();
  const size_t bytes = count * c.esize();
  auto* out = static_cast<uint8_t*>(recv);
  copy_if_distinct(out + size_t(r) * bytes, send, bytes);
  for (int k = 1; k < n; ++k) {
    int to = (r + k) % n, from = (r - k + n) % n;
    c.recv_final(from, out + size_t(from) * bytes, bytes, size_t(n) * bytes);
    c.send(to, out + size_t(r) * bytes, bytes);
  }
  c.wait_all();
}

namespace {

// Sends every other rank j its part of the input, part(j) = {first byte,
// elements}; receives this rank's `len` elements from each of them, and
// folds the n contributions (its own: `mine`) in rank order into dst with
// one reduce_many (f32 accumulation for f16/bf16). It returns only after its
// sends are out, so dst may overlap the input: in place, the fold reads and
// writes the same elements, which reduce_many allows (it accumulates, then
// stores).
template <class Part>
void exchange_and_fold(Context& c, const uint8_t* mine, size_t len, Part part, void* dst) {
  const int n = c.size(), r = c.rank();
  const size_t bytes = len * c.esize();
  auto* tmp = static_cast<uint8_t*>(c.scratch(bytes * size_t(n)));
  for (int k = 1; k < n; ++k) {
    int to = (r + k) % n, from = (r - k + n) % n;
    c.recv(from, tmp + size_t(from) * bytes, bytes);
    auto [first, elems] = part(to);
    c.send(to, first, elems * c.esize());
  }
  c.wait_all();
  std::vector<const void*> srcs(n);
  for (int j = 0; j < n; ++j) srcs[j] = j == r ? mine : tmp + size_t(j) * bytes;
  reduce_many(dst, srcs.data(), n, len, c.dtype(), c.rop());
  finish_avg(c, dst, len);
}

}  // namespace

void reduce_scatter_direct(Context& c, const void* send, void* recv, size_t count) {
  const auto* in = static_cast<const uint8_t*>(send);
  const size_t block = count * c.esize();
  exchange_and_fold(c, in + size_t(c.rank()) * block, count,
                    [&](int j) { return std::pair{in + size_t(j) * block, count}; }, recv);
}

void all_reduce_direct(Context& c, const void* send, void* recv, size_t count,
                       size_t chunk_bytes) {
  const int n = c.size(), r = c.rank();
  const size_t es = c.esize();
  std::vector<size_t> offs(n + 1);
  for (int i = 0; i <= n; ++i) offs[i] = block_offset(count, n, i);
  // Folding into recv's own block is safe only after everyone has our copy
  // of it, which exchange_and_fold guarantees.
  const auto* in = static_cast<const uint8_t*>(send);
  exchange_and_fold(
      c, in + offs[r] * es, offs[r + 1] - offs[r],
      [&](int j) { return std::pair{in + offs[j] * es, offs[j + 1] - offs[j]}; },
      static_cast<uint8_t*>(recv) + offs[r] * es);
  ring_gather_blocks(c, recv, offs, chunk_bytes, 1000);
}

void all_reduce_oneshot(Context& c, const void* send, void* recv, size_t count) {
  const auto* in = static_cast<const uint8_t*>(send);
  exchange_and_fold(c, in, count, [&](int) { return std::pair{in, count}; }, recv);
}

void reduce_direct(Context& c, const void* send, void* recv, size_t count, int root) {
  const int n = c.size(), r = c.rank();
  const size_t bytes = count * c.esize();
  if (r != root) {
    c.send(root, send, bytes);
    c.wait_all();
    return;
  }
  auto* tmp = static_cast<uint8_t*>(c.scratch(bytes * size_t(n)));
  std::vector<const void*> srcs(n);
  for (int j = 0; j < n; ++j) {
    if (j == r) {
      srcs[j] = send;
    } else {
      c.recv(j, tmp + size_t(j) * bytes, bytes);
      srcs[j] = tmp + size_t(j) * bytes;
    }
  }
  c.wait_all();
  reduce_many(recv, srcs.data(), n, count, c.dtype(), c.rop());
  finish_avg(c, recv, count);
}

namespace {

// gather, scatter, all_to_all(v): the only algorithm of each.
double pairwise_cost(const CostInputs& m) { return (m.n - 1) * m.a + (m.n - 1) / m.n * m.N * m.b; }

}  // namespace

void add_direct(Table& t) {
  t.push_back({CollOp::kAllReduce, AlgoId::kDirect, "direct",
               "rank-order fold (BRAID_DETERMINISTIC; f16/bf16 beyond 2 ranks)", always,
               [](const CostInputs& m) {
                 // Across hosts each of a host's L ranks sends its blocks
                 // for the n − L remote ranks, twice: 2L(n − L)/n · N on
                 // the host's link.
                 const double L = m.max_local;
                 return 2 * (m.n - 1) * m.a +
                        m.wire_bytes(2 * (m.n - 1) / m.n, 2 * L * (m.n - L) / m.n) * m.b +
                        (m.n - 1) / m.n * m.N * m.g * 1.2;
               },
               [](Context& c, const Call& k) {
                 all_reduce_direct(c, k.send, k.recv, k.count, k.chunk_bytes);
               }});
  t.push_back({CollOp::kAllReduce, AlgoId::kOneshot, "oneshot",
               "one step, rank-order fold: small buffers, ranks outnumbering cores, shared memory",
               always,
               [](const CostInputs& m) {
                 // One step, n−1 messages out and in at once; every byte
                 // crosses (n−1) times and is folded once per peer. At 2
                 // ranks it is rd's single exchange plus a staging copy, so
                 // rd keeps that case. The n−1 concurrent messages cost about
                 // a quarter step each beyond the first, and the byte term
                 // is 3× the naive (β + γ): the factors that put the
                 // crossover with rd where `braid bench --algo` finds it
                 // (bench/select_regret.py checks the choices). Only over
                 // shared memory, where small sends land in the peers' fast
                 // boxes without waking them: over TCP every message is a
                 // wake-up, and rd wins.
                 if (m.n == 2 || !m.all_shm) return std::numeric_limits<double>::infinity();
                 return m.a * (1 + (m.n - 2) / 4) + 3 * (m.n - 1) * m.N * (m.b + m.g);
               },
               [](Context& c, const Call& k) { all_reduce_oneshot(c, k.send, k.recv, k.count); }});
  t.push_back({CollOp::kReduce, AlgoId::kDirect, "direct", "rank-order fold at the root", always,
               [](const CostInputs& m) {
                 return (m.n - 1) * (m.a + m.N * m.b) + (m.n - 1) * m.N * m.g;
               },
               [](Context& c, const Call& k) {
                 reduce_direct(c, k.send, k.recv, k.count, k.root);
               }});
  t.push_back({CollOp::kAllGather, AlgoId::kDirect, "direct", "every block to every rank at once",
               always,
               [](const CostInputs& m) {
                 return (m.n - 1) * m.a * 0.5 + (m.n - 1) / m.n * m.N * m.b * 1.3;
               },
               [](Context& c, const Call& k) { all_gather_direct(c, k.send, k.recv, k.count); }});
  t.push_back({CollOp::kReduceScatter, AlgoId::kDirect, "direct", "rank-order fold of each block",
               always,
               [](const CostInputs& m) {
                 return (m.n - 1) * m.a * 0.5 + (m.n - 1) / m.n * m.N * (m.b * 1.3 + m.g);
               },
               [](Context& c, const Call& k) {
                 reduce_scatter_direct(c, k.send, k.recv, k.count);
               }});
  t.push_back({CollOp::kGather, AlgoId::kDirect, "direct", "the root receives from all at once",
               always, pairwise_cost,
               [](Context& c, const Call& k) {
                 gather_direct(c, k.send, k.recv, k.count, k.root);
               }});
  t.push_back({CollOp::kScatter, AlgoId::kDirect, "direct", "the root sends to all at once",
               always, pairwise_cost,
               [](Context& c, const Call& k) {
                 scatter_direct(c, k.send, k.recv, k.count, k.root);
               }});
  auto all_to_all = [](Context& c, const Call& k) {
    all_to_all_v_direct(c, k.send, k.blocks.send_counts, k.blocks.send_displs, k.recv,
                        k.blocks.recv_counts, k.blocks.recv_displs);
  };
  t.push_back({CollOp::kAllToAll, AlgoId::kDirect, "direct", "every pair at once", always,
               pairwise_cost, all_to_all});
  t.push_back({CollOp::kAllToAllV, AlgoId::kDirect, "direct", "every pair at once", always,
               pairwise_cost, all_to_all});
  // send / recv: one message (the grouped path posts its messages itself).
  t.push_back({CollOp::kSend, AlgoId::kDirect, "direct", "one message", always,
               [](const CostInputs& m) { return m.a + m.N * m.b; },
               [](Context& c, const Call& k) {
                 const size_t bytes = k.count * c.esize();
                 c.wait(k.sending ? c.send(k.root, k.send, bytes) : c.recv(k.root, k.recv, bytes));
               }});
}

}  // namespace braid::comm::algo
