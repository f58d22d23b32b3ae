// The simulator's network: the links of a plan::Cluster with ranks packed
// by host and hosts by rack (world-rank order, as parallel::Mesh and the
// planner's placement lay them out), and the time each message takes.
//
// Model (docs/PLAN.md, "The simulator"). A message of B bytes from s to d
// crosses a path of links:
//   same host:  s's port out, d's port in            (intra_host α, β)
//   same rack:  s's NIC out, d's NIC in              (inter_host α, β)
//   other rack: s's NIC out, s's rack uplink, d's rack downlink, d's NIC in
// A device uses NIC (local index mod nics_per_host) of its host. A rack's
// uplink (and downlink) is hosts_per_rack·nics_per_host / oversubscription
// lanes, each at the NIC's rate (one lane at a proportionally lower rate
// when that is below one). The message reserves one lane of every link of
// its path for B·β (β the slowest on the path), from the earliest time,
// at or after it is sent, at which all of them are free that long
// (reservations are intervals: a message may take a gap before one made
// earlier for later; first come, first served, no fair sharing), and
// arrives α after the reservation ends. α is latency only: it holds no
// link, so messages on one link pipeline. A host with fewer cores
// (cores_per_host) than ranks has a pool of that many cores: a message
// also holds a core of its sender's host (and, between hosts, of its
// receiver's) for its B·β, and a reduction holds one for its B·γ. Where
// the devices are CPU cores (Runtime::kBraidCpu), a rank's own core copies
// what it sends and runs its reductions and compute, so those take turns
// too (a GPU's links and copy engines move data while its cores reduce).
// Between CPU ranks of a host the message is two copies, as braid's
// shared-memory wire makes it: the sender's into a slot (B·β/2, holding its
// core and the ports) and the receiver's out of it (B·β/2, copy_out_s) or
// its reduction straight from the slot (B·γ); β is the probe's, measured
// over both.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "braid/plan_cluster.h"

namespace braid::plan::sim {

enum class LinkKind : uint8_t { kIntraHost, kInterHost, kSpine };
const char* link_kind_name(LinkKind k);  // "intra_host", "inter_host", "spine"

struct Flow {
  double start = 0;       // when its path was free
  double inject_end = 0;  // start + B·β: the sender's buffer is free again
  double arrival = 0;     // inject_end + α
  double waited = 0;      // start − the time it was sent
  LinkKind kind = LinkKind::kIntraHost;
};

class Network {
 public:
  // Throws Error(kInvalidArgument) for ranks < 1.
  Network(const Cluster& c, int ranks);
  int ranks() const { return n_; }
  int host_of(int r) const { return r / per_host_; }
  int rack_of(int r) const { return host_of(r) / hosts_per_rack_; }
  int devices_per_host() const { return per_host_; }
  // The link kind between two ranks.
  LinkKind kind(int src, int dst) const;
  // Sends `bytes` from src to dst at time `now`, reserving its path.
  Flow send(int src, int dst, double now, double bytes);
  // The receiver's own copy of a message out of shared memory (CPU
  // devices, same host): half of the link's B·β, the other half being the
  // sender's copy in (send); 0 elsewhere. A receive that reduces reads the
  // slot in its reduction instead (γ).
  double copy_out_s(int src, int dst, double bytes) const;
  // A span of `dur` seconds of compute on rank's host, from `earliest`
  // or the first time after it that one of the host's cores is free (at
  // once when the host has a core per rank), and, for CPU devices, the
  // rank's own core; its start. `now`: the engine's clock.
  double compute(int rank, double now, double earliest, double dur);
  // Bytes carried so far, by kind, and the time messages waited for links.
  double bytes(LinkKind k) const { return bytes_[size_t(k)]; }
  double waited_s() const { return waited_; }
  uint64_t messages() const { return messages_; }

 private:
  // A lane's reservations, start → end, disjoint.
  struct Lane : std::map<double, double> {
    // The end of a reservation overlapping [t0, t1), or -1 if none does.
    double conflict(double t0, double t1) const;
  };
  struct Link {
    std::vector<Lane> lanes;
    double beta = 0;  // s per byte of one lane
  };
  int add_link(int lanes, double beta);
  // Reserves one lane of each of path[0..hops) for `dur` from the earliest
  // time ≥ `earliest` they are all free; returns it.
  double reserve(const int* path, int hops, double now, double earliest, double dur);
  // A message between two CPU ranks of one host: the sender's copy into
  // shared memory and the receiver's out of it (top comment).
  bool two_copies(int src, int dst) const {
    return own_core_ >= 0 && src != dst && kind(src, dst) == LinkKind::kIntraHost;
  }
  int n_, per_host_, hosts_per_rack_, nics_;
  comm::LinkCost intra_, inter_;
  std::vector<Link> links_;
  int port_out_ = 0, port_in_ = 0, nic_out_ = 0, nic_in_ = 0, up_ = 0, down_ = 0;
  std::vector<int> cpu_;  // by host: its core pool's link, -1 if it has a core per rank
  int own_core_ = -1;     // CPU devices: rank r's own core is link own_core_ + r
  double bytes_[3] = {0, 0, 0};
  double waited_ = 0;
  uint64_t messages_ = 0;
};

}  // namespace braid::plan::sim
