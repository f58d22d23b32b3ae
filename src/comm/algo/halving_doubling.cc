// Recursive halving-doubling (Rabenseifner) and recursive doubling
// all-reduce, with non-power-of-two world sizes.
//
// Let p be the largest power of two ≤ n and rem = n − p. Fold: among the
// first 2·rem ranks, each even rank sends its whole vector to the odd rank
// after it, which reduces it in and takes part as virtual rank r/2; the even
// rank sits out and receives the result at the end (unfold). Ranks ≥ 2·rem
// are virtual rank r − rem.
//
// Halving-doubling (large-ish messages, p a power of two):
//   reduce-scatter by recursive halving: for mask = p/2 … 1, exchange half of
//   the current range with partner v ^ mask, keep (and reduce into) the
//   other half; after log p steps each virtual rank owns 1/p of the vector;
//   all-gather by recursive doubling: the same pairs in reverse order.
//   Cost: 2·log p·α + 2(p−1)/p·Nβ + (p−1)/p·Nγ (across H hosts the first
//   log H steps and 2(1 − 1/H)·N at the link between hosts, shared by a
//   host's ranks, the rest at the host's own α and β), + Nγ for copying the
//   input into recv (both work in place there; the copy is priced like a
//   reduction pass), plus 2(α + Nβ) + Nγ to fold when n is not a power of
//   two.
// Recursive doubling (small messages): for mask = 1 … p/2 exchange the whole
//   vector with v ^ mask and reduce. Cost: log p·(α + Nβ + 2Nγ) + Nγ
//   (+ fold), each step's reduction priced at 2Nγ (across H hosts of L
//   ranks, n a power of two: the first log L steps at the host's own α
//   and β, the other log H with the host's L ranks sharing its link).
//   IEEE addition is commutative, so both partners compute identical bits.
#include <cstring>

#include "braid/reduce.h"
#include "comm/algo/algorithms.h"
#include "comm/algo/registry.h"

namespace braid::comm::algo {
namespace {

struct Fold {
  int p = 1, rem = 0, vrank = -1;
  int real(int v) const { return v < rem ? 2 * v + 1 : v + rem; }
};

Fold make_fold(int n, int r) {
  Fold f;
  while (f.p * 2 <= n) f.p *= 2;
  f.rem = n - f.p;
  if (r < 2 * f.rem)
    f.vrank = (r % 2 == 0) ? -1 : r / 2;
  else
    f.vrank = r - f.rem;
  return f;
}

// The fold around a power-of-two schedule: copies send into recv, folds the
// extra ranks in (an even rank among the first 2·rem sends its vector and
// waits for the result), runs `body(f, buf)` on the p participants, and
// hands the result back to the ranks that sat out.
template <class Body>
void with_fold(Context& c, const void* send, void* recv, size_t count, Body body) {
  const int n = c.size(), r = c.rank();
  const size_t bytes = count * c.esize();
  auto* buf = static_cast<uint8_t*>(recv);
  c.copy(recv, send, bytes);
  if (n == 1) return;
  Fold f = make_fold(n, r);
  if (r < 2 * f.rem) {
    if (r % 2 == 0) {
      c.send(r + 1, buf, bytes, 100);
      c.recv(r + 1, buf, bytes, 101);
      c.wait_all();
      return;
    }
    c.wait(c.recv_reduce(r - 1, buf, buf, count, 100));
  }
  body(f, buf);
  if (r < 2 * f.rem) c.send(r - 1, buf, bytes, 101);
  c.wait_all();
}

}  // namespace

void all_reduce_hd(Context& c, const void* send, void* recv, size_t count) {
  const size_t es = c.esize();
  with_fold(c, send, recv, count, [&](const Fold& f, uint8_t* buf) {
    const int v = f.vrank;
    struct Range {
      size_t lo, hi, mid;
      bool keep_low;
    };
    std::vector<Range> stack;
    size_t lo = 0, hi = count;
    uint32_t step = 0;
    for (int mask = f.p / 2; mask >= 1; mask /= 2, ++step) {
      int partner = f.real(v ^ mask);
      size_t mid = lo + (hi - lo) / 2;
      bool keep_low = (v & mask) == 0;
      stack.push_back({lo, hi, mid, keep_low});
      size_t klo = keep_low ? lo : mid, khi = keep_low ? mid : hi;
      size_t slo = keep_low ? mid : lo, shi = keep_low ? hi : mid;
      c.send(partner, buf + slo * es, (shi - slo) * es, step);
      c.wait(c.recv_reduce(partner, buf + klo * es, buf + klo * es, khi - klo, step));
      c.wait_all();
      lo = klo;
      hi = khi;
    }
    finish_avg(c, buf + lo * es, hi - lo);
    for (int mask = 1; mask < f.p; mask *= 2, ++step) {
      int partner = f.real(v ^ mask);
      Range R = stack.back();
      stack.pop_back();
      size_t olo = R.keep_low ? R.mid : R.lo, ohi = R.keep_low ? R.hi : R.mid;
      c.send(partner, buf + lo * es, (hi - lo) * es, step);
      c.recv(partner, buf + olo * es, (ohi - olo) * es, step);
      c.wait_all();
      lo = R.lo;
      hi = R.hi;
    }
  });
}

void all_reduce_rd(Context& c, const void* send, void* recv, size_t count) {
  const size_t es = c.esize();
  with_fold(c, send, recv, count, [&](const Fold& f, uint8_t* buf) {
    auto* mine = static_cast<uint8_t*>(c.scratch(count * es));
    uint32_t step = 0;
    for (int mask = 1; mask < f.p; mask *= 2, ++step) {
      int partner = f.real(f.vrank ^ mask);
      if (count) std::memcpy(mine, buf, count * es);  // count 0: buffers may be null
      c.send(partner, mine, count * es, step);
      c.recv_reduce(partner, buf, buf, count, step);
      c.wait_all();
    }
    finish_avg(c, buf, count);
  });
}

void add_halving_doubling(Table& t) {
  t.push_back({CollOp::kAllReduce, AlgoId::kHalvingDoubling, "hd",
               "recursive halving-doubling (Rabenseifner): mid-sized buffers", always,
               [](const CostInputs& m) {
                 const int p = m.p;
                 // Halving starts with the farthest partner: across hosts
                 // (ranks packed by host) the first log H steps cross a
                 // host's links, N/2, N/4, … N/H of every rank of the host
                 // at once, and the doubling mirrors them: 2(1 − 1/H)·N a
                 // rank, 2L(1 − 1/H)·N a host, spread over its NICs
                 // (wire_bytes). The other log(p/H) steps and their
                 // 2(1/H − 1/p)·N stay inside the host, at its α and β.
                 const double H = std::min(double(std::max(m.hosts, 1)), double(p));
                 const double out = 1.0 - 1.0 / H, in = 1.0 / H - 1.0 / p;
                 const double steps_out = std::log2(H), steps_in = std::log2(p) - steps_out;
                 const double wire = m.hosts > 1
                                         ? 2 * steps_out * m.step_alpha(m.a) +
                                               2 * steps_in * m.step_alpha(m.as) +
                                               m.wire_bytes(2 * out, 2 * m.max_local * out) * m.b +
                                               2 * in * m.N * m.bs
                                         : 2 * std::log2(p) * m.a + 2 * (p - 1.0) / p * m.N * m.b;
                 return wire + (p - 1.0) / p * m.N * m.g + m.N * m.g +
                        (m.folded ? 2 * (m.a + m.N * m.b) + m.N * m.g : 0);
               },
               [](Context& c, const Call& k) { all_reduce_hd(c, k.send, k.recv, k.count); }});
  t.push_back({CollOp::kAllReduce, AlgoId::kRecursiveDoubling, "rd",
               "recursive doubling, whole vector each step: small buffers", always,
               [](const CostInputs& m) {
                 const double each = 2 * m.N * m.g;  // a step's reduction
                 double steps;
                 if (m.hosts > 1 && !m.folded && m.max_local > 1) {
                   // Doubling starts with the nearest partner: across hosts
                   // (ranks packed by host, a power of two of them) the
                   // first log L steps stay inside a host, and in each of
                   // the other log H steps all L ranks of a host send their
                   // whole vector across at once (wire_bytes).
                   const double L = std::min(double(m.max_local), double(m.p));
                   const double in = std::log2(L), out = std::log2(double(m.p)) - in;
                   steps = in * (m.step_alpha(m.as) + m.N * m.bs + each) +
                           out * (m.step_alpha(m.a) + m.wire_bytes(1, L) * m.b + each);
                 } else {
                   steps = std::log2(m.p) * (m.step_alpha(m.a) + m.N * m.b + each);
                 }
                 return steps + m.N * m.g + (m.folded ? 2 * (m.a + m.N * m.b) + m.N * m.g : 0);
               },
               [](Context& c, const Call& k) { all_reduce_rd(c, k.send, k.recv, k.count); }});
}

}  // namespace braid::comm::algo
