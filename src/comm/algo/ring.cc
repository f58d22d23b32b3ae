// Ring algorithms: all-reduce, reduce-scatter, all-gather.
//
// Ranks form a ring r → r+1. The buffer is cut into n segments, and each
// segment into C chunks so that consecutive steps pipeline: a chunk is
// forwarded as soon as it has arrived, not when its whole segment has.
//
// all-reduce = reduce-scatter phase + all-gather phase, 2(n−1) steps:
//   reduce-scatter step s (0 ≤ s ≤ n−2): send segment (r−s) to r+1, receive
//     segment (r−s−1) from r−1 and reduce it into the local copy. After n−1
//     steps rank r holds the fully reduced segment (r+1).
//   all-gather step t (0 ≤ t ≤ n−2): send segment (r+1−t), receive (r−t).
// With C = max(1, ⌈N/n / chunk⌉) chunks of c = N/(nC) bytes per segment
// (chunk: the communicator's, BRAID_CHUNK_BYTES), the pipeline fills in
// C − 1 extra steps.
// Cost: max(path, busy) + (n−1)/n·Nγ, with S = 2(n−1) steps,
//   path = S(ᾱ + c·β̄) + (C − 1)(α + c·β)   the last chunk's way round,
//   busy = S·C·c·β + α                     the slowest link's load,
// ᾱ, β̄ the mean of the ring's hops (CostInputs::ring_ab: across hosts, H
// of the n hops cross a host's link), α, β the slowest link's. On one
// kind of link with one chunk a step this is (2(n−1))α + 2(n−1)/n·Nβ +
// (n−1)/n·Nγ; with many chunks the link's load decides (the α of each
// step is latency, hidden behind the chunks in flight). A ring whose hops
// differ (several hosts, several ranks on one) on hosts with more ranks
// than cores is priced at the host link's β on every step instead
// (CostInputs::ring_ab says why).
// Bandwidth-optimal: the choice for large messages.
// Latency grows linearly with n, so small messages go to recursive
// doubling instead.
//
// reduce-scatter alone: the same first phase, shifted so rank r ends with
// segment r: S = n − 1 steps, plus (n−1)/n·Nγ (N = the whole input).
// all-gather alone: the second phase: S = n − 1 steps (N = whole output).
// reduce: the reduce-scatter phase, then every rank hands its reduced
// segment to the root: (2(n−1) + C − 1)α + (n−1)/n·N(2β + γ) at the root's
// links — independent of log n, unlike the tree. When ranks outnumber
// cores, at least its work over the cores: n(n−1)·C·2α + (n−1)·N(β + γ) +
// (n−1)(2α + N/n·β) (CostInputs::shared).
//
// The last step's chunks are not forwarded: when the call's output is large
// (stream_copy.h) they are received with streaming stores (recv_final).
#include <cstring>

#include "braid/reduce.h"
#include "comm/algo/algorithms.h"
#include "comm/algo/registry.h"
#include "comm/transport/shm/stream_copy.h"

namespace braid::comm::algo {

void copy_if_distinct(void* dst, const void* src, size_t bytes) {
  auto* d = static_cast<uint8_t*>(dst);
  auto* s = static_cast<const uint8_t*>(src);
  if (d == s || bytes == 0) return;
  if (d < s + bytes && s < d + bytes) {  // overlapping
    std::memmove(d, s, bytes);
    return;
  }
  // In 256 KiB pieces: one multi-megabyte memcpy (rep movsb here) leaves the
  // block out of cache for the peer that reads it next (shared all_gather
  // of 4 MiB, 2 ranks: 6.0 GB/s whole, ~14.5 in pieces).
  constexpr size_t kPiece = 256 << 10;
  for (size_t i = 0; i < bytes; i += kPiece) std::memcpy(d + i, s + i, std::min(kPiece, bytes - i));
}

void copy_final_if_distinct(void* dst, const void* src, size_t bytes, size_t out_bytes) {
  auto* d = static_cast<uint8_t*>(dst);
  auto* s = static_cast<const uint8_t*>(src);
  if (bytes > 0 && stream_out(out_bytes) && (d + bytes <= s || s + bytes <= d)) {
    stream_copy(d, s, bytes);
  } else {
    copy_if_distinct(dst, src, bytes);
  }
}

void finish_avg(Context& c, void* buf, size_t count) {
  if (c.rop() == ReduceOp::kAvg) scale_avg(buf, count, c.dtype(), c.size());
}

namespace {

inline int mod(int a, int n) { return ((a % n) + n) % n; }

// Chunk layout: the segment at ring position j is block blk(j) of the
// buffer (elements [seg[b], seg[b+1])), cut into C chunks. Blocks belong to
// ranks, positions to the ring order, so a topology-aware ring reorders
// positions without moving any rank's block.
struct Layout {
  std::vector<size_t> seg;  // n+1 offsets, by block
  std::vector<int> blk;     // ring position -> block
  int chunks = 1;
  size_t chunk_off(int j, int k) const {
    int b = blk[size_t(j)];
    return seg[b] + block_offset(seg[b + 1] - seg[b], chunks, k);
  }
  size_t chunk_len(int j, int k) const {
    int b = blk[size_t(j)];
    size_t len = seg[b + 1] - seg[b];
    return block_offset(len, chunks, k + 1) - block_offset(len, chunks, k);
  }
};

Layout make_layout(const Context& c, const std::vector<size_t>& seg, size_t esize,
                   size_t chunk_bytes) {
  Layout L;
  L.seg = seg;
  for (int p = 0; p + 1 < int(seg.size()); ++p) L.blk.push_back(c.ring_at(p));
  size_t maxseg = 0;
  for (size_t j = 0; j + 1 < seg.size(); ++j) maxseg = std::max(maxseg, seg[j + 1] - seg[j]);
  L.chunks = chunk_count(maxseg, esize, chunk_bytes);
  return L;
}

std::vector<size_t> even_segments(size_t count, int n) {
  std::vector<size_t> s(n + 1);
  for (int i = 0; i <= n; ++i) s[i] = block_offset(count, n, i);
  return s;
}

}  // namespace

namespace {

// The ring all-reduce, optionally stopping after the reduce-scatter phase
// (then rank at ring position p holds the reduced segment p+1 in `out`).
void ring_reduce_phases(Context& c, const void* send, uint8_t* out, size_t count,
                        size_t chunk_bytes, bool with_gather, Layout* layout_out) {
  const int n = c.size(), r = c.ring_pos();
  const size_t es = c.esize();
  auto* in = static_cast<const uint8_t*>(send);
  Layout L = make_layout(c, even_segments(count, n), es, chunk_bytes);
  if (layout_out) *layout_out = L;
  const int C = L.chunks, S = with_gather ? 2 * (n - 1) : n - 1;
  const int next = c.ring_at(mod(r + 1, n)), prev = c.ring_at(mod(r - 1, n));
  // Segment sent and received at global step s.
  auto send_seg = [&](int s) { return s < n - 1 ? mod(r - s, n) : mod(r + 1 - (s - (n - 1)), n); };
  auto recv_seg = [&](int s) { return s < n - 1 ? mod(r - s - 1, n) : mod(r - (s - (n - 1)), n); };

  std::vector<Request*> rq(size_t(S) * C);
  for (int s = 0; s < S; ++s) {
    int j = recv_seg(s);
    for (int k = 0; k < C; ++k) {
      size_t off = L.chunk_off(j, k) * es, len = L.chunk_len(j, k);
      rq[size_t(s) * C + k] =
          s < n - 1   ? c.recv_reduce(prev, out + off, in + off, len, uint32_t(s))
          : s < S - 1 ? c.recv(prev, out + off, len * es, uint32_t(s))
                      : c.recv_final(prev, out + off, len * es, count * es, uint32_t(s));
    }
  }
  for (int k = 0; k < C; ++k) {
    int j = send_seg(0);
    size_t off = L.chunk_off(j, k) * es;
    c.send(next, in + off, L.chunk_len(j, k) * es, 0);
  }
  // Each completed chunk is forwarded at the next step.
  complete_in_order(c, rq, [&](size_t i) {
    int s = int(i / C), k = int(i % C);
    int j = recv_seg(s);
    if (s == n - 2) finish_avg(c, out + L.chunk_off(j, k) * es, L.chunk_len(j, k));
    if (s + 1 < S) c.send(next, out + L.chunk_off(j, k) * es, L.chunk_len(j, k) * es, uint32_t(s + 1));
  });
  c.wait_all();
}

}  // namespace

void all_reduce_ring(Context& c, const void* send, void* recv, size_t count, size_t chunk_bytes) {
  if (c.size() == 1) {
    copy_if_distinct(recv, send, count * c.esize());
    return;
  }
  ring_reduce_phases(c, send, static_cast<uint8_t*>(recv), count, chunk_bytes, true, nullptr);
}

void reduce_ring(Context& c, const void* send, void* recv, size_t count, int root,
                 size_t chunk_bytes) {
  const int n = c.size(), me = c.rank();
  const size_t es = c.esize();
  if (n == 1) {
    copy_if_distinct(recv, send, count * es);
    return;
  }
  auto* buf = static_cast<uint8_t*>(me == root ? recv : c.scratch(count * es));
  Layout L;
  ring_reduce_phases(c, send, buf, count, chunk_bytes, false, &L);
  // Position p now owns segment p+1; everyone hands its segment to the root.
  auto seg_range = [&](int j, size_t* off, size_t* len) {
    int b = L.blk[size_t(j)];
    *off = L.seg[b];
    *len = L.seg[b + 1] - L.seg[b];
  };
  size_t off, len;
  if (me != root) {
    seg_range(mod(c.ring_pos() + 1, n), &off, &len);
    c.send(root, buf + off * es, len * es, uint32_t(2 * n));
  } else {
    for (int p = 0; p < n; ++p) {
      int owner = c.ring_at(p);
      if (owner == root) continue;
      seg_range(mod(p + 1, n), &off, &len);
      c.recv(owner, buf + off * es, len * es, uint32_t(2 * n));
    }
  }
  c.wait_all();
}

void ring_gather_blocks(Context& c, void* buf, const std::vector<size_t>& offs,
                        size_t chunk_bytes, uint32_t step_base, const void* own_src) {
  const int n = c.size(), r = c.ring_pos();
  const size_t es = c.esize();
  auto* b = static_cast<uint8_t*>(buf);
  if (n == 1) {
    if (own_src != nullptr) copy_if_distinct(b + offs[0] * es, own_src, (offs[1] - offs[0]) * es);
    return;
  }
  Layout L = make_layout(c, offs, es, chunk_bytes);
  const int C = L.chunks, S = n - 1;
  const int next = c.ring_at(mod(r + 1, n)), prev = c.ring_at(mod(r - 1, n));
  std::vector<Request*> rq(size_t(S) * C);
  for (int s = 0; s < S; ++s) {
    int j = mod(r - s - 1, n);
    for (int k = 0; k < C; ++k) {
      uint8_t* at = b + L.chunk_off(j, k) * es;
      const size_t len = L.chunk_len(j, k) * es;
      rq[size_t(s) * C + k] = s + 1 < S ? c.recv(prev, at, len, step_base + s)
                                        : c.recv_final(prev, at, len, offs.back() * es, step_base + s);
    }
  }
  const size_t own0 = L.chunk_off(r, 0);
  for (int k = 0; k < C; ++k) {
    uint8_t* at = b + L.chunk_off(r, k) * es;
    if (own_src != nullptr)
      c.send(next, static_cast<const uint8_t*>(own_src) + (L.chunk_off(r, k) - own0) * es,
             L.chunk_len(r, k) * es, step_base, at);
    else
      c.send(next, at, L.chunk_len(r, k) * es, step_base);
  }
  complete_in_order(c, rq, [&](size_t i) {
    int s = int(i / C), k = int(i % C);
    if (s + 1 < S) {
      int j = mod(r - s - 1, n);
      c.send(next, b + L.chunk_off(j, k) * es, L.chunk_len(j, k) * es, step_base + s + 1);
    }
  });
  c.wait_all();
}

void all_gather_ring(Context& c, const void* send, void* recv, size_t count, size_t chunk_bytes) {
  const int n = c.size(), r = c.rank();
  const size_t es = c.esize();
  auto* out = static_cast<uint8_t*>(recv);
  const size_t bytes = count * es;
  std::vector<size_t> offs(n + 1);
  for (int i = 0; i <= n; ++i) offs[i] = size_t(i) * count;
  // Out of place, with the input outside the output: this rank's block goes
  // out from the input and lands in the output with the same sends
  // (Request::copy_to). In place or overlapping: copy first, send from out.
  auto* in = static_cast<const uint8_t*>(send);
  if (bytes > 0 && (in + bytes <= out || in >= out + size_t(n) * bytes)) {
    ring_gather_blocks(c, recv, offs, chunk_bytes, 0, send);
    return;
  }
  copy_if_distinct(out + size_t(r) * bytes, send, bytes);
  ring_gather_blocks(c, recv, offs, chunk_bytes, 0);
}

void reduce_scatter_ring(Context& c, const void* send, void* recv, size_t count,
                         size_t chunk_bytes) {
  const int n = c.size(), r = c.ring_pos();
  const size_t es = c.esize();
  auto* in = static_cast<const uint8_t*>(send);
  auto* out = static_cast<uint8_t*>(recv);
  if (n == 1) {
    copy_if_distinct(recv, send, count * es);
    finish_avg(c, recv, count);
    return;
  }
  std::vector<size_t> offs(n + 1);
  for (int i = 0; i <= n; ++i) offs[i] = size_t(i) * count;
  Layout L = make_layout(c, offs, es, chunk_bytes);
  const int C = L.chunks, S = n - 1;
  const int next = c.ring_at(mod(r + 1, n)), prev = c.ring_at(mod(r - 1, n));
  // Partial sums of segments passing through this rank live in scratch; the
  // last step lands in recv. Segment j's partial sits at scratch + j*count.
  auto* tmp = static_cast<uint8_t*>(c.scratch(size_t(n) * count * es));
  auto dst_of = [&](int s, int j, int k) -> uint8_t* {
    size_t off = L.chunk_off(j, k) * es;
    return s == S - 1 ? out + (off - size_t(L.blk[j]) * count * es) : tmp + off;
  };
  std::vector<Request*> rq(size_t(S) * C);
  for (int s = 0; s < S; ++s) {
    int j = mod(r - s - 2, n);
    for (int k = 0; k < C; ++k)
      rq[size_t(s) * C + k] = c.recv_reduce(prev, dst_of(s, j, k), in + L.chunk_off(j, k) * es,
                                            L.chunk_len(j, k), uint32_t(s));
  }
  int j0 = mod(r - 1, n);
  for (int k = 0; k < C; ++k)
    c.send(next, in + L.chunk_off(j0, k) * es, L.chunk_len(j0, k) * es, 0);
  complete_in_order(c, rq, [&](size_t i) {
    int s = int(i / C), k = int(i % C);
    int j = mod(r - s - 2, n);
    if (s + 1 < S) c.send(next, dst_of(s, j, k), L.chunk_len(j, k) * es, uint32_t(s + 1));
    else finish_avg(c, dst_of(s, j, k), L.chunk_len(j, k));
  });
  c.wait_all();
}

void add_ring(Table& t) {
  t.push_back({CollOp::kAllReduce, AlgoId::kRing, "ring",
               "bandwidth-optimal, pipelined in chunks: large buffers", always,
               [](const CostInputs& m) {
                 return m.ring_ab(2 * (m.n - 1)) + (m.n - 1) / m.n * m.N * m.g;
               },
               [](Context& c, const Call& k) {
                 all_reduce_ring(c, k.send, k.recv, k.count, k.chunk_bytes);
               }});
  t.push_back({CollOp::kReduce, AlgoId::kRing, "ring",
               "reduce-scatter, then the segments to the root: large buffers", always,
               [](const CostInputs& m) {
                 return m.shared((2 * (m.n - 1) + m.chunks - 1) * m.a +
                                     (m.n - 1) / m.n * m.N * (2 * m.b + m.g),
                                 m.n * (m.n - 1) * m.chunks * m.aw + (m.n - 1) * m.N * (m.b + m.g) +
                                     (m.n - 1) * (m.aw + m.N / m.n * m.b));
               },
               [](Context& c, const Call& k) {
                 reduce_ring(c, k.send, k.recv, k.count, k.root, k.chunk_bytes);
               }});
  t.push_back({CollOp::kAllGather, AlgoId::kRing, "ring", "pipelined ring: large buffers", always,
               [](const CostInputs& m) {
                 return m.ring_ab(m.n - 1);
               },
               [](Context& c, const Call& k) {
                 all_gather_ring(c, k.send, k.recv, k.count, k.chunk_bytes);
               }});
  t.push_back({CollOp::kReduceScatter, AlgoId::kRing, "ring", "pipelined ring: large buffers",
               always,
               [](const CostInputs& m) {
                 return m.ring_ab(m.n - 1) + (m.n - 1) / m.n * m.N * m.g;
               },
               [](Context& c, const Call& k) {
                 reduce_scatter_ring(c, k.send, k.recv, k.count, k.chunk_bytes);
               }});
}

}  // namespace braid::comm::algo
