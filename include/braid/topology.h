// Topology-aware ring order.
//
// A ring all-reduce moves the same bytes over every link of its ring, so it
// runs at the speed of its slowest link. These functions order ranks so the
// ring crosses slow links as rarely as possible.
#pragma once

#include <string>
#include <vector>

namespace braid {

// From a link-bandwidth matrix (bw[i][j] > 0 where i and j are linked, any
// unit; 0 = no direct link): a Hamiltonian cycle that maximises the slowest
// link, then the total bandwidth. Exact (dynamic programming over subsets)
// up to 16 ranks; beyond, a greedy nearest-fastest-neighbour tour improved by
// 2-opt. Returns the ring starting at rank 0, e.g. {0, 3, 5, 2, 4, 7, 1, 6}.
// Throws Error(kInvalidArgument) if the matrix is not square.
std::vector<int> ring_order_from_bandwidth(const std::vector<std::vector<double>>& bw);

// A BRAID_TOPOLOGY file's text: a JSON array of rows of bandwidths. Throws
// Error(kInvalidArgument) naming `from` when it does not parse as one.
std::vector<std::vector<double>> parse_bandwidth_matrix(const std::string& text, const std::string& from);

// From each rank's host name: ranks of one host stay contiguous (in rank
// order) and hosts follow in order of their first rank, so the ring crosses
// each host boundary exactly once in each direction.
std::vector<int> ring_order_from_hosts(const std::vector<std::string>& hosts);

// The slowest link bandwidth along `ring` (closing edge included).
double ring_bottleneck(const std::vector<std::vector<double>>& bw, const std::vector<int>& ring);

}  // namespace braid
