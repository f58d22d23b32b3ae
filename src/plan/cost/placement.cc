// Where a group's ranks sit, and what its traffic shares. Ranks are packed
// by host, hosts by rack, in world-rank order (parallel::Mesh's layout), so
// a group of `size` ranks `stride` apart has min(size, D / stride) members
// on a host of D devices when stride < D, else one per host; likewise per
// rack. Every group of one kind (all tp groups, all dp groups) runs its
// collective at the same time, and a ring (or the hierarchical
// all-reduce's ring of leaders) leaves a host and a rack once per group, so
// D / (members per host) flows share a host's NICs and D·R / (members per
// rack) flows share a rack's uplink of R·NICs / oversubscription ports:
// the inter-host β is scaled by the worse of the two shares.
#include <algorithm>
#include <cmath>

#include "braid/plan_cost.h"

namespace braid::plan {
namespace {

// Members of one group inside a block of `block` consecutive ranks.
int members_per(int block, int size, int stride) {
  if (stride >= block) return 1;
  return std::max(1, std::min(size, block / stride));
}

}  // namespace

Placement place_group(const Cluster& c, int size, int stride) {
  Placement p;
  comm::GroupLinks& g = p.links;
  g.ranks = size;
  g.inner = c.intra_host.cost;
  g.outer = c.inter_host.cost;
  g.gamma_s_per_b = c.gamma_s_per_b > 0 ? c.gamma_s_per_b : 3.0 / c.device.memory_bw;
  g.inner_is_shm = c.intra_host.shared_memory;
  g.cores = c.cores_per_host;
  const int D = c.devices_per_host, rack = c.devices_per_host * c.hosts_per_rack;
  const int per_host = members_per(D, size, stride);
  g.max_local = per_host;
  g.nics = c.nics_per_host;
  g.hosts = (size + per_host - 1) / per_host;
  p.link_class = g.hosts > 1 ? c.inter_host.name : c.intra_host.name;
  if (g.hosts == 1) return p;
  const int per_rack = members_per(rack, size, stride);
  p.spans_racks = size > per_rack;
  const double nic_share = double(D) / per_host / c.nics_per_host;
  double spine_share = 1;
  if (p.spans_racks) {
    const double flows = double(rack) / per_rack;
    const double ports = double(c.hosts_per_rack) * c.nics_per_host / c.spine_oversubscription;
    spine_share = flows / ports;
  }
  g.outer.beta_s_per_b *= std::max({1.0, nic_share, spine_share});
  return p;
}

}  // namespace braid::plan
