// The algorithm registry: for each collective, the table of its algorithms.
//
// An entry is everything the rest of the library knows about an algorithm:
// its name (what BRAID_ALGO, set_algorithm, the flight recorder and
// `braid bench` show and accept), when it can run, its α-β cost, and its
// code. Each algorithm file (src/comm/algo/*.cc) adds its own entries, so
// the schedule in its top comment, the cost formula and the code sit
// together; the selector (comm/algo/select.h) only iterates the table.
//
// Cost formulas use n ranks, N bytes (the collective's natural size, see
// Selector::choose), α the per-message latency, β the time per byte on the
// wire and γ the time per byte of reduction.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "comm/algo/context.h"
#include "comm/transport/shm/shared_memory.h"
#include "comm/transport/transport.h"

namespace braid::comm {
class CommImpl;
}

namespace braid::comm::algo {

// An algorithm's identity. The order is the selector's tie-break: of two
// algorithms with the same predicted cost, the one listed first wins.
enum class AlgoId : uint8_t {
  kTree,
  kRing,
  kHalvingDoubling,
  kRecursiveDoubling,
  kDirect,
  kHier,
  kChain,
  kOneshot,
  kShared,
  kDissemination,
};

// What decides, beyond the collective, whether an algorithm can run.
struct Fit {
  int n = 1;                 // ranks
  int hosts = 1;             // > 1: the communicator has a host hierarchy
  bool all_shm = false;      // every peer is reached over shared memory
  bool shared_span = false;  // the call's buffer lies in alloc_shared memory
};

// The figures a cost formula reads for one call of N bytes. The selector
// fills them (comm/algo/select.cc says where α, β and γ come from).
struct CostInputs {
  double n = 1, N = 0;
  double a = 0, b = 0;  // α and β of the communicator's link kind
  double g = 0;         // γ, already at cache speed for small buffers
  double aw = 0;        // core time of one hand-off: 2α (the waker's and the sleeper's)
  double as = 0, bs = 0;  // α and β of shared memory (the hierarchy's inner level)
  int p = 1;            // the largest power of two ≤ n
  bool folded = false;  // n is not a power of two
  double chunk = 0;     // chain's pipelining chunk the model assumes, bytes
  double chunks = 1;    // chunks per segment of a ring: max(1, ⌈N/n/the comm's chunk⌉)
  double ring_chunk = 1 << 20;  // the communicator's pipelining chunk, bytes
  int hosts = 1, max_local = 1;  // the hierarchy: hosts, ranks of the largest
  int nics = 1;                  // links a host's ranks spread their traffic across hosts over
  int cores = 1;                 // usable cores of a host
  bool all_shm = false;          // every peer over shared memory (and n > 1)
  bool oversubscribed = false;   // a host has more ranks than cores
  // With more ranks than cores the ranks take turns on the cores, so a
  // schedule lasts at least its total work shared among the cores, however
  // short its critical path (see Selector::predict).
  double shared(double path, double work) const {
    return oversubscribed ? std::max(path, work / cores) : path;
  }
  // The bytes (in units of N) a rank sends, or, across hosts, what the
  // busiest link out of a host carries when `per_host` (in N, the host's
  // whole outbound traffic) spread over its links is more: the ranks of a
  // host (packed by host, at most max_local of them) share its nics links,
  // and only one of them is on the wire at a time. An algorithm whose
  // every rank talks to ranks on other hosts at once loads them with all
  // of them.
  double wire_bytes(double per_rank, double per_host) const {
    const double links = std::max(1, std::min(nics, max_local));
    return hosts > 1 ? std::max(per_rank, per_host / links) * N : per_rank * N;
  }
  // The α of one step of an algorithm in which every rank sends and
  // receives at once (ring, rd, hd), across hosts whose ranks outnumber
  // their cores: the step ends only when each of a host's ranks has had a
  // core in turn, max_local / cores wake-ups one after another (`as` is
  // the wake-up's α there). At 2 hosts x 2 ranks on one core each, a
  // ring's step took 66 µs at 256 KiB where its link moves the segment in
  // 38 (docs/PERFORMANCE.md §8). On one host the fitted terms and
  // `shared` price it instead.
  double step_alpha(double alpha) const {
    if (hosts <= 1 || !oversubscribed) return alpha;
    return std::max(alpha, std::ceil(double(max_local) / double(std::max(cores, 1))) * as);
  }
  // The mean α of a ring's hops in rank order: across hosts (ranks packed
  // by host) `hosts` of its n hops cross a host's link (α) and the rest
  // stay inside (as). Each step of a ring waits for the previous step's
  // hop, so a ring's steps walk it round and pay the hops' mean, not the
  // slowest hop's α every step.
  double ring_hop_alpha() const { return hosts > 1 ? (hosts * a + (n - hosts) * as) / n : a; }
  // The same mean for β.
  double ring_hop_beta() const { return hosts > 1 ? (hosts * b + (n - hosts) * bs) / n : b; }
  // The α and β time of `steps` ring steps, each moving a segment of N/n
  // bytes in `chunks` chunks of c bytes: the longer of two bounds.
  //   path: the last chunk's way round: `steps` hops at the hops' mean
  //     α and β (the steps walk the ring), behind the chunks − 1 before it
  //     at the slowest link's rate;
  //   busy: the slowest link (β = b) carries steps × chunks chunks one
  //     after another, and α is latency that holds no link.
  // On one kind of link with one chunk a step both are steps·(α + c·β) and
  // steps·c·β + α, so path decides, as the flat formula has it; a pipeline
  // of many chunks is bound by busy; across hosts a ring of small segments
  // pays the mean hop, not the host link's β, on every step.
  //
  // A ring whose hops differ (some inside a host, some between hosts) on
  // hosts whose ranks outnumber their cores is priced at the host link's β
  // on every step instead (the fill's α too, the steps' α the hops'
  // mean): there one core carries each of its host's hops in turn, the
  // link's and the in-host one's, so no step of it overlaps another. At 2
  // hosts x 2 ranks on one core each, 256 KiB–1 MiB, such rings moved
  // 0.35–0.77 of what hier did (docs/PERFORMANCE.md §8) where the
  // mean-hop price had the selector pick them. Ranks with cores (or
  // devices) of their own pay the mean hop, as the simulator's ring does
  // (docs/PLAN.md).
  double ring_ab(double steps) const {
    const double c = N / n / chunks;
    if (hosts > 1 && hosts < n && oversubscribed)
      return steps * step_alpha(ring_hop_alpha()) + (chunks - 1) * a + steps * chunks * c * b;
    return ring_time(steps, c, chunks, step_alpha(ring_hop_alpha()), ring_hop_beta(), a, b);
  }
  // The same for `steps` steps of `chunks` chunks of c bytes over hops of
  // mean α, β (am, bm) whose slowest link is (a_max, b_max).
  static double ring_time(double steps, double c, double chunks, double am, double bm, double a_max,
                          double b_max) {
    const double path = steps * (am + c * bm) + (chunks - 1) * (a_max + c * b_max);
    const double busy = steps * chunks * c * b_max + a_max;
    return std::max(path, busy);
  }
};

inline double log2c(int n) { return std::ceil(std::log2(double(std::max(n, 1)))); }

// The per-rank counts and displacements of an all_to_all(v), in elements
// (copies: a queued call outlives its caller's vectors).
struct Blocks {
  std::vector<size_t> send_counts, send_displs, recv_counts, recv_displs;
};

// The arguments of one call, as an algorithm's run takes them.
struct Call {
  const void* send = nullptr;
  void* recv = nullptr;    // broadcast: the buffer
  size_t count = 0;        // elements per rank (all_gather: of the input)
  int root = -1;           // rooted collectives; send/recv: the peer
  bool sending = false;    // send/recv: which of the two
  size_t chunk_bytes = 0;  // the communicator's pipelining chunk
  SharedSpan span;         // shared: the region of recv (reduce_scatter: send)
  CommImpl* comm = nullptr;  // hier: the hierarchy; chain: the accumulator ring
  Blocks blocks;             // all_to_all(v)
};

struct Algorithm {
  CollOp op;
  AlgoId id;
  std::string name;
  // What it is and when the cost model prefers it (`braid bench --list-algos`).
  std::string summary;
  // nullptr when it can run in `f`; else why not, as "needs ...".
  const char* (*why_not)(const Fit& f);
  // Predicted seconds (n > 1); infinity: never chosen by cost (it still
  // runs when forced, if why_not allows).
  double (*cost)(const CostInputs& m);
  void (*run)(Context& c, const Call& k);
};

// Algorithms that can always run.
inline const char* always(const Fit&) { return nullptr; }

// The algorithms of `op` in tie-break order (empty for an op without any).
const std::vector<const Algorithm*>& algorithms(CollOp op);
// The entry of `op` called `name`, or nullptr.
const Algorithm* find(CollOp op, std::string_view name);
// The entry of `op` with `id`; Error(kInternal) if there is none.
const Algorithm& get(CollOp op, AlgoId id);
// "ring, hd, rd, ...": the names of `op`'s algorithms.
std::string names(CollOp op);
// The collectives whose algorithms BRAID_ALGO names, with the names it
// (and set_algorithm) calls them by, in the order the documentation lists
// them.
struct Collective {
  CollOp op;
  const char* name;
};
const std::vector<Collective>& collectives();

// Each algorithm file adds its entries (the table is built once, on first
// use, from these; an explicit list, so a static library keeps them all).
using Table = std::vector<Algorithm>;
void add_tree(Table& t);             // tree.cc
void add_ring(Table& t);             // ring.cc
void add_halving_doubling(Table& t); // halving_doubling.cc
void add_direct(Table& t);           // direct.cc
void add_hierarchical(Table& t);     // hierarchical.cc
void add_chain(Table& t);            // chain.cc
void add_chain_reduce(Table& t);     // chain_reduce.cc
void add_shared(Table& t);           // shared.cc
void add_barrier(Table& t);          // barrier.cc

}  // namespace braid::comm::algo
