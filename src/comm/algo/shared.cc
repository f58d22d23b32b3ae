// Shared-memory collectives ("shared"): the buffer every peer must read lies
// in memory from Communicator::alloc_shared, which every peer has mapped, so
// ranks read (and for all-reduce, write) each other's buffers directly, with
// no staging slots. All three follow one pattern:
//
// 1. Each rank sends every peer a descriptor of its shared buffer (region
//    id, offset, bytes). Sending it also says "my input is final".
// 2. Each rank does its part straight out of the peers' mappings.
// 3. Each rank sends every peer "done" and waits for all of theirs: no peer
//    touches this rank's buffer any more, so the caller may use it.
//
// all-reduce (the buffer: recv): rank j owns block j. Piece by piece
//   (kPieceBytes, so a piece stays in cache) it folds the n ranks' pieces in
//   rank order 0, 1, …, n−1 into its own buffer (reduce_many: the fold of the
//   direct algorithm and of BRAID_DETERMINISTIC=1, so the bits are the same
//   as theirs), then copies the piece into every peer's buffer. Each rank
//   reads N bytes and writes N (N·(n−1)/n of each in peers' memory); the
//   ring moves each byte through a staging slot (a copy in, a copy out) in
//   both of its phases: about twice the memory traffic.
// reduce-scatter (the buffer: send): rank j folds block j of every rank's
//   input into its output. Reads N, writes N/n.
// all-gather (the buffer: recv): rank j copies block p of rank p's output
//   (p's own contribution) into its own. Reads and writes N·(n−1)/n: one
//   copy per byte, where the ring makes two.
// Cost: 2(n−1)α for the two rounds of small messages, plus β per byte read
// or written above: all-reduce 2Nβ + (n−1)/n·Nγ, reduce-scatter
// (N + N/n)β + (n−1)/n·Nγ, all-gather 2(n−1)/n·Nβ. The selector does not
// compare these: "shared" runs whenever its buffers allow, unless an
// override names another algorithm.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "braid/error.h"
#include "braid/reduce.h"
#include "comm/algo/algorithms.h"
#include "comm/algo/registry.h"

namespace braid::comm::algo {

namespace {

constexpr size_t kPieceBytes = 64 << 10;

struct Descriptor {
  uint64_t region = 0;
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

// Sends `bytes` at `mine` to every peer and receives each peer's into
// theirs + p * bytes (one round; `step` labels the messages).
void swap_with_peers(Context& c, const void* mine, size_t bytes, void* theirs, uint32_t step) {
  for (int p = 0; p < c.size(); ++p) {
    if (p == c.rank()) continue;
    c.send(p, mine, bytes, step);
    c.recv(p, static_cast<uint8_t*>(theirs) + size_t(p) * bytes, bytes, step);
  }
  c.wait_all();
}

// Step 1: swaps descriptors of `mine` (bytes at `span`) with every peer and
// returns each rank's buffer in this process (this rank's own: `mine`).
std::vector<uint8_t*> exchange(Context& c, const SharedSpan& span, void* mine, size_t bytes,
                               const char* what) {
  const int n = c.size(), r = c.rank();
  const SharedRegion& reg = *span.region;
  Descriptor d_mine{reg.id, span.offset, bytes};
  std::vector<Descriptor> theirs(static_cast<size_t>(n));
  swap_with_peers(c, &d_mine, sizeof d_mine, theirs.data(), 0);

  std::vector<uint8_t*> buf(static_cast<size_t>(n));
  for (int p = 0; p < n; ++p) {
    if (p == r) {
      buf[size_t(p)] = static_cast<uint8_t*>(mine);
      continue;
    }
    const Descriptor& d = theirs[size_t(p)];
    if (d.region != reg.id)
      throw Error(Errc::kMismatch,
                  std::string(what) + " on shared memory: rank " + std::to_string(r) +
                      "'s buffer is in alloc_shared region " + std::to_string(reg.id) +
                      ", rank " + std::to_string(p) + "'s in region " + std::to_string(d.region) +
                      "; every rank must pass memory from the same alloc_shared call");
    if (d.bytes != bytes || d.offset > reg.peer_bytes[size_t(p)] ||
        d.bytes > reg.peer_bytes[size_t(p)] - d.offset)
      throw Error(Errc::kProtocol, std::string(what) + " on shared memory: rank " +
                                       std::to_string(p) + " described bytes [" +
                                       std::to_string(d.offset) + ", +" +
                                       std::to_string(d.bytes) + ") of region " +
                                       std::to_string(reg.id) + ", which holds " +
                                       std::to_string(reg.peer_bytes[size_t(p)]));
    buf[size_t(p)] = reg.peer_base[size_t(p)] + d.offset;
  }
  return buf;
}

// Step 3.
void finish(Context& c) {
  const uint8_t done = 1;
  std::vector<uint8_t> got(static_cast<size_t>(c.size()));
  swap_with_peers(c, &done, 1, got.data(), 1);
}

// out[b0, b1) = fold of every rank's [b0, b1), in rank order, piece by piece;
// then `after(i, len)` for each piece.
template <class After>
void fold_block(Context& c, const std::vector<uint8_t*>& in, uint8_t* out, size_t b0, size_t b1,
                After&& after) {
  const int n = c.size();
  const size_t es = c.esize();
  const size_t piece = std::max<size_t>(1, kPieceBytes / es);
  std::vector<const void*> srcs(static_cast<size_t>(n));
  for (size_t i = b0; i < b1; i += piece) {
    const size_t len = std::min(piece, b1 - i);
    for (int p = 0; p < n; ++p) srcs[size_t(p)] = in[size_t(p)] + i * es;
    uint8_t* o = out + (i - b0) * es;
    reduce_many(o, srcs.data(), n, len, c.dtype(), c.rop());
    finish_avg(c, o, len);
    after(i, len, o);
  }
}

}  // namespace

void all_reduce_shared(Context& c, const SharedSpan& span, const void* send, void* recv,
                       size_t count) {
  const int n = c.size(), r = c.rank();
  const size_t es = c.esize();
  copy_if_distinct(recv, send, count * es);
  std::vector<uint8_t*> buf = exchange(c, span, recv, count * es, "all_reduce");
  const size_t b0 = block_offset(count, n, r), b1 = block_offset(count, n, r + 1);
  fold_block(c, buf, buf[size_t(r)] + b0 * es, b0, b1, [&](size_t i, size_t len, uint8_t* o) {
    for (int p = 0; p < n; ++p)
      if (p != r) std::memcpy(buf[size_t(p)] + i * es, o, len * es);
  });
  finish(c);
}

void reduce_scatter_shared(Context& c, const SharedSpan& span, const void* send, void* recv,
                           size_t count) {
  const int n = c.size(), r = c.rank();
  const size_t es = c.esize();
  std::vector<uint8_t*> in = exchange(c, span, const_cast<void*>(send), count * size_t(n) * es,
                                      "reduce_scatter");
  // In place (recv is block r of send) the fold reads block r of this rank's
  // input while writing it; reduce_many accumulates before it stores.
  fold_block(c, in, static_cast<uint8_t*>(recv), size_t(r) * count, size_t(r + 1) * count,
             [](size_t, size_t, uint8_t*) {});
  finish(c);
}

void all_gather_shared(Context& c, const SharedSpan& span, const void* send, void* recv,
                       size_t count) {
  const int n = c.size(), r = c.rank();
  const size_t bytes = count * c.esize();
  auto* out = static_cast<uint8_t*>(recv);
  copy_if_distinct(out + size_t(r) * bytes, send, bytes);
  std::vector<uint8_t*> buf = exchange(c, span, recv, bytes * size_t(n), "all_gather");
  for (int k = 1; k < n; ++k) {  // staggered, so that no rank is everyone's first source
    int p = (r + k) % n;
    copy_if_distinct(out + size_t(p) * bytes, buf[size_t(p)] + size_t(p) * bytes, bytes);
  }
  finish(c);
}

namespace {

const char* needs_shared_buffer(const Fit& f) {
  return f.shared_span ? nullptr
                       : "needs its buffer in Communicator::alloc_shared memory on every rank "
                         "(at least kSharedMinBytes, several ranks on one host)";
}

}  // namespace

void add_shared(Table& t) {
  const char* summary = "peers read each other's alloc_shared buffers: runs whenever it applies";
  t.push_back({CollOp::kAllReduce, AlgoId::kShared, "shared", summary, needs_shared_buffer,
               [](const CostInputs& m) {
                 return 2 * (m.n - 1) * m.a + 2 * m.N * m.b + (m.n - 1) / m.n * m.N * m.g;
               },
               [](Context& c, const Call& k) {
                 all_reduce_shared(c, k.span, k.send, k.recv, k.count);
               }});
  t.push_back({CollOp::kAllGather, AlgoId::kShared, "shared", summary, needs_shared_buffer,
               [](const CostInputs& m) {
                 return 2 * (m.n - 1) * m.a + 2 * (m.n - 1) / m.n * m.N * m.b;
               },
               [](Context& c, const Call& k) {
                 all_gather_shared(c, k.span, k.send, k.recv, k.count);
               }});
  t.push_back({CollOp::kReduceScatter, AlgoId::kShared, "shared", summary, needs_shared_buffer,
               [](const CostInputs& m) {
                 return 2 * (m.n - 1) * m.a + (m.N + m.N / m.n) * m.b + (m.n - 1) / m.n * m.N * m.g;
               },
               [](Context& c, const Call& k) {
                 reduce_scatter_shared(c, k.span, k.send, k.recv, k.count);
               }});
}

}  // namespace braid::comm::algo
