#include "plan/sim/network.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>

#include "braid/error.h"

namespace braid::plan::sim {

constexpr int kMaxHops = 8;  // NIC out, uplink, downlink, NIC in, two pools, a core

const char* link_kind_name(LinkKind k) {
  switch (k) {
    case LinkKind::kIntraHost: return "intra_host";
    case LinkKind::kInterHost: return "inter_host";
    case LinkKind::kSpine: return "spine";
  }
  return "?";
}

Network::Network(const Cluster& c, int ranks)
    : n_(ranks), per_host_(std::max(1, c.devices_per_host)),
      hosts_per_rack_(std::max(1, c.hosts_per_rack)), nics_(std::max(1, c.nics_per_host)),
      intra_(c.intra_host.cost), inter_(c.inter_host.cost) {
  if (ranks < 1) throw Error(Errc::kInvalidArgument, "simulator: ranks must be >= 1");
  if (c.spine_oversubscription < 1)
    throw Error(Errc::kInvalidArgument, "simulator: cluster '" + c.name +
                                            "': spine_oversubscription must be >= 1");
  const int hosts = (n_ + per_host_ - 1) / per_host_;
  const int racks = (hosts + hosts_per_rack_ - 1) / hosts_per_rack_;
  // Links are stored kind by kind; the index of a device's or host's link
  // is its base plus its number.
  port_out_ = int(links_.size());
  for (int r = 0; r < n_; ++r) add_link(1, intra_.beta_s_per_b);
  port_in_ = int(links_.size());
  for (int r = 0; r < n_; ++r) add_link(1, intra_.beta_s_per_b);
  nic_out_ = int(links_.size());
  for (int i = 0; i < hosts * nics_; ++i) add_link(1, inter_.beta_s_per_b);
  nic_in_ = int(links_.size());
  for (int i = 0; i < hosts * nics_; ++i) add_link(1, inter_.beta_s_per_b);
  // A rack's uplink: hosts_per_rack·nics ports' worth over the
  // oversubscription, as whole lanes at the NIC rate, or one slower lane.
  const double capacity = double(hosts_per_rack_) * nics_ / c.spine_oversubscription;
  const int lanes = std::max(1, int(std::floor(capacity + 1e-9)));
  const double lane_beta = inter_.beta_s_per_b * std::max(1.0, 1.0 / capacity);
  up_ = int(links_.size());
  for (int k = 0; k < racks; ++k) add_link(lanes, lane_beta);
  down_ = int(links_.size());
  for (int k = 0; k < racks; ++k) add_link(lanes, lane_beta);
  // More devices (ranks) on a host than cores: the cores are a pool that
  // every copy and reduction of the host's ranks takes a core of.
  cpu_.assign(size_t(hosts), -1);
  for (int h = 0; h < hosts; ++h)
    if (c.cores_per_host >= 1 && std::min(per_host_, n_ - h * per_host_) > c.cores_per_host)
      cpu_[size_t(h)] = add_link(c.cores_per_host, 0);
  if (c.device.runtime == Runtime::kBraidCpu) {
    own_core_ = int(links_.size());
    for (int r = 0; r < n_; ++r) add_link(1, 0);
  }
}

int Network::add_link(int lanes, double beta) {
  links_.push_back({std::vector<Lane>(size_t(lanes)), beta});
  return int(links_.size()) - 1;
}

double Network::Lane::conflict(double t0, double t1) const {
  auto it = upper_bound(t0);  // the first interval starting after t0
  if (it != begin()) {
    auto prev = std::prev(it);
    if (prev->second > t0) return prev->second;
  }
  if (it != end() && it->first < t1) return it->second;
  return -1;
}

LinkKind Network::kind(int src, int dst) const {
  if (host_of(src) == host_of(dst)) return LinkKind::kIntraHost;
  return rack_of(src) == rack_of(dst) ? LinkKind::kInterHost : LinkKind::kSpine;
}

Flow Network::send(int src, int dst, double now, double bytes) {
  Flow f;
  f.kind = kind(src, dst);
  ++messages_;
  bytes_[size_t(f.kind)] += bytes;
  if (src == dst) {  // a rank's message to itself moves no bytes on a wire
    f.start = f.inject_end = f.arrival = now;
    return f;
  }
  int path[kMaxHops];
  int hops = 0;
  double alpha;
  if (f.kind == LinkKind::kIntraHost) {
    path[hops++] = port_out_ + src;
    path[hops++] = port_in_ + dst;
    if (cpu_[size_t(host_of(src))] >= 0) path[hops++] = cpu_[size_t(host_of(src))];  // a core copies
    if (own_core_ >= 0) path[hops++] = own_core_ + src;
    alpha = intra_.alpha_s;
  } else {
    const int nic_s = host_of(src) * nics_ + (src % per_host_) % nics_;
    const int nic_d = host_of(dst) * nics_ + (dst % per_host_) % nics_;
    path[hops++] = nic_out_ + nic_s;
    if (f.kind == LinkKind::kSpine) {
      path[hops++] = up_ + rack_of(src);
      path[hops++] = down_ + rack_of(dst);
    }
    path[hops++] = nic_in_ + nic_d;
    for (int h : {host_of(src), host_of(dst)})
      if (cpu_[size_t(h)] >= 0) path[hops++] = cpu_[size_t(h)];
    if (own_core_ >= 0) path[hops++] = own_core_ + src;
    alpha = inter_.alpha_s;
  }
  double beta = 0;  // the cores' pool has no rate of its own (β 0)
  for (int i = 0; i < hops; ++i) beta = std::max(beta, links_[size_t(path[i])].beta);
  // CPU ranks of one host: the sender's half of the two copies.
  if (two_copies(src, dst)) beta /= 2;
  const double dur = bytes * beta;
  const double t = reserve(path, hops, now, now, dur);
  f.start = t;
  f.waited = f.start - now;
  waited_ += f.waited;
  f.inject_end = f.start + dur;
  f.arrival = f.inject_end + alpha;
  return f;
}

double Network::reserve(const int* path, int hops, double now, double earliest, double dur) {
  // The earliest start at or after `earliest` at which every link of the
  // path has a lane free for the whole span. Reservations are intervals,
  // so a span may take a gap before one made earlier for later.
  if (dur <= 0) return earliest;
  Lane* lane[kMaxHops] = {};
  double t = earliest;
  for (bool moved = true; moved;) {
    moved = false;
    for (int i = 0; i < hops && !moved; ++i) {
      double next = std::numeric_limits<double>::infinity();
      lane[i] = nullptr;
      for (Lane& l : links_[size_t(path[i])].lanes) {
        while (!l.empty() && l.begin()->second <= now) l.erase(l.begin());  // the past
        const double end = l.conflict(t, t + dur);
        if (end < 0) {
          lane[i] = &l;
          break;
        }
        next = std::min(next, end);
      }
      if (lane[i] == nullptr) {
        t = next;
        moved = true;
      }
    }
  }
  for (int i = 0; i < hops; ++i) lane[i]->emplace(t, t + dur);
  return t;
}

double Network::copy_out_s(int src, int dst, double bytes) const {
  return two_copies(src, dst) ? bytes * intra_.beta_s_per_b / 2 : 0;
}

double Network::compute(int rank, double now, double earliest, double dur) {
  int path[2];
  int hops = 0;
  if (cpu_[size_t(host_of(rank))] >= 0) path[hops++] = cpu_[size_t(host_of(rank))];
  if (own_core_ >= 0) path[hops++] = own_core_ + rank;
  if (hops == 0) return earliest;
  return reserve(path, hops, now, earliest, dur);
}

}  // namespace braid::plan::sim
