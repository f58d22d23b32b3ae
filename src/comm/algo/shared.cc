// Shared-memory all-reduce ("shared"): every rank's buffer lies in memory
// from Communicator::alloc_shared, which every peer has mapped, so ranks
// reduce straight out of each other's buffers, with no staging copies.
//
// 1. Each rank sends every peer a descriptor of its buffer (region id,
//    offset, bytes). Sending it also says "my input is final".
// 2. Rank j owns block j of the buffer. Piece by piece (kPieceBytes, so a
//    piece stays in cache), it folds the n ranks' pieces in rank order 0, 1,
//    …, n−1 into its own buffer (reduce_many: the fold of the direct
//    algorithm and of BRAID_DETERMINISTIC=1, so the bits are the same as
//    theirs), then copies the piece into every peer's buffer.
// 3. Each rank sends every peer "done" and waits for all of theirs: every
//    block is then written everywhere, and no peer touches this buffer any
//    more, so the caller may use it.
// Cost: 2(n−1)α for the two rounds of small messages; each rank reads N
// bytes and writes N (N·(n−1)/n of each in peers' memory). The ring moves
// each byte through a staging slot (a copy in, a copy out) in both phases:
// about twice the memory traffic.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "braid/error.h"
#include "braid/reduce.h"
#include "comm/algo/algorithms.h"

namespace braid::comm::algo {

namespace {

constexpr size_t kPieceBytes = 64 << 10;

struct Descriptor {
  uint64_t region = 0;
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

}  // namespace

void all_reduce_shared(Context& c, const SharedSpan& span, const void* send, void* recv,
                       size_t count) {
  const int n = c.size(), r = c.rank();
  const size_t es = c.esize(), bytes = count * es;
  const SharedRegion& reg = *span.region;
  copy_if_distinct(recv, send, bytes);

  Descriptor mine{reg.id, span.offset, bytes};
  std::vector<Descriptor> theirs(static_cast<size_t>(n));
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    c.send(p, &mine, sizeof mine, 0);
    c.recv(p, &theirs[size_t(p)], sizeof(Descriptor), 0);
  }
  c.wait_all();

  std::vector<uint8_t*> buf(static_cast<size_t>(n));
  for (int p = 0; p < n; ++p) {
    if (p == r) {
      buf[size_t(p)] = static_cast<uint8_t*>(recv);
      continue;
    }
    const Descriptor& d = theirs[size_t(p)];
    if (d.region != reg.id)
      throw Error(Errc::kMismatch,
                  "all_reduce on shared memory: rank " + std::to_string(r) +
                      "'s buffer is in alloc_shared region " + std::to_string(reg.id) +
                      ", rank " + std::to_string(p) + "'s in region " + std::to_string(d.region) +
                      "; every rank must pass memory from the same alloc_shared call");
    if (d.bytes != bytes || d.offset > reg.peer_bytes[size_t(p)] ||
        d.bytes > reg.peer_bytes[size_t(p)] - d.offset)
      throw Error(Errc::kProtocol, "all_reduce on shared memory: rank " + std::to_string(p) +
                                       " described bytes [" + std::to_string(d.offset) + ", +" +
                                       std::to_string(d.bytes) + ") of region " +
                                       std::to_string(reg.id) + ", which holds " +
                                       std::to_string(reg.peer_bytes[size_t(p)]));
    buf[size_t(p)] = reg.peer_base[size_t(p)] + d.offset;
  }

  const size_t b0 = block_offset(count, n, r), b1 = block_offset(count, n, r + 1);
  const size_t piece = std::max<size_t>(1, kPieceBytes / es);
  std::vector<const void*> srcs(static_cast<size_t>(n));
  for (size_t i = b0; i < b1; i += piece) {
    const size_t len = std::min(piece, b1 - i);
    for (int p = 0; p < n; ++p) srcs[size_t(p)] = buf[size_t(p)] + i * es;
    uint8_t* out = buf[size_t(r)] + i * es;
    reduce_many(out, srcs.data(), n, len, c.dtype(), c.rop());
    finish_avg(c, out, len);
    for (int p = 0; p < n; ++p)
      if (p != r) std::memcpy(buf[size_t(p)] + i * es, out, len * es);
  }

  uint8_t done = 1;
  std::vector<uint8_t> got(static_cast<size_t>(n));
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    c.send(p, &done, 1, 1);
    c.recv(p, &got[size_t(p)], 1, 1);
  }
  c.wait_all();
}

}  // namespace braid::comm::algo
