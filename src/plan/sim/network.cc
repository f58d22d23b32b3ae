#include "plan/sim/network.h"

#include <algorithm>
#include <cmath>

#include "braid/error.h"

namespace braid::plan::sim {

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
}

int Network::add_link(int lanes, double beta) {
  links_.push_back({std::vector<double>(size_t(lanes), 0.0), beta});
  return int(links_.size()) - 1;
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
  int path[4];
  int hops = 0;
  double alpha;
  if (f.kind == LinkKind::kIntraHost) {
    path[hops++] = port_out_ + src;
    path[hops++] = port_in_ + dst;
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
    alpha = inter_.alpha_s;
  }
  double beta = 0;
  for (int i = 0; i < hops; ++i) beta = std::max(beta, links_[size_t(path[i])].beta);
  const double dur = bytes * beta;
  // The message starts when every link of its path has a lane free. On a
  // link of several lanes it takes the lane that came free last before
  // then (best fit), so that a rank's back-to-back messages reuse one lane
  // instead of reserving every lane ahead of the other ranks.
  f.start = now;
  for (int i = 0; i < hops; ++i) {
    const auto& busy = links_[size_t(path[i])].busy;
    f.start = std::max(f.start, *std::min_element(busy.begin(), busy.end()));
  }
  for (int i = 0; i < hops; ++i) {
    auto& busy = links_[size_t(path[i])].busy;
    double* lane = nullptr;
    for (double& b : busy)
      if (b <= f.start && (lane == nullptr || b > *lane)) lane = &b;
    *lane = f.start + dur;
  }
  f.waited = f.start - now;
  waited_ += f.waited;
  f.inject_end = f.start + dur;
  f.arrival = f.inject_end + alpha;
  return f;
}

}  // namespace braid::plan::sim
