// CommImpl's set-up: rank 0's tuning text, the link probe, the selector,
// the hosts and ring order, and the host hierarchy's sub-communicators.
#include <algorithm>
#include <fstream>
#include <map>
#include <set>

#include "braid/env.h"
#include "braid/log.h"
#include "braid/topology.h"
#include <nlohmann/json.hpp>
#include "comm/engine/comm_impl.h"
#include "comm/setup/probe.h"

namespace braid::comm {

std::string CommImpl::agree_cost_text(Store& pstore) const {
  // Every rank parses its own file first, so that a bad BRAID_TUNING fails
  // every rank that has it, not only rank 0 while the others wait on the
  // store. Then all take rank 0's text.
  const std::string mine = read_tuning();
  parse_cost_params(mine, default_tuning_path());
  if (size_ == 1) return mine;
  if (rank_ == 0) {
    pstore.set_str("cost", mine);
    return mine;
  }
  return pstore.get_str("cost");  // parsed by make_selector
}

std::string CommImpl::link_class_to(int peer) const {
  const std::string kind = tp_->kind_to(peer);
  if (kind != "tcp") return kind;
  return hosts_.at(size_t(peer)) == hosts_.at(size_t(rank_)) ? "tcp" : "net";
}

void CommImpl::make_selector(int nhosts, int max_local, bool any_tcp, bool all_shm, int cores) {
  CostParams p = parse_cost_params(cost_text_, "of rank 0");
  // TCP hops between hosts cost what the link between hosts costs (the
  // probe's "net" class), not loopback's.
  if (std::set<std::string>(hosts_.begin(), hosts_.end()).size() > 1) p.tcp = p.net;
  selector_ = std::make_unique<Selector>(size_, any_tcp, p, nhosts, max_local, all_shm, cores);
  selector_->set_chunk_bytes(chunk_bytes_);
  selector_->load_env_overrides();
  last_choice_ = LastChoice{};
}

bool CommImpl::probe_links(Store& pstore, int max_local, int cores) {
  if (size_ < 2) return false;
  std::vector<ProbeLink> plan;
  if (rank_ == 0) {
    std::vector<ProbeLink> kinds;  // rank 0's lowest peer over each link class
    for (const char* k : {"shm", "tcp", "net"})
      for (int p = 1; p < size_; ++p)
        if (link_class_to(p) == k) {
          kinds.push_back({k, p});
          break;
        }
    // Without a cache to write to, every job would probe again: not cheap.
    if (!default_tuning_path().empty())
      plan = probe_plan(cost_text_, kinds, size_, max_local, cores);
    pstore.set_str("probe", format_plan(plan));
  } else {
    plan = parse_plan(pstore.get_str("probe"));
  }
  if (plan.empty()) return false;
  std::string text = cost_text_;
  const double t0 = now_s();
  for (const auto& l : plan) {
    if (rank_ != 0 && rank_ != l.peer) continue;
    const int other = rank_ == 0 ? l.peer : 0;
    auto send = [&](const void* b, size_t n) {
      launch_p2p(true, b, nullptr, n, DType::kU8, other, -1, n, false, CollOp::kProbe);
    };
    auto recv = [&](void* b, size_t n) {
      launch_p2p(false, nullptr, b, n, DType::kU8, other, -1, n, false, CollOp::kProbe);
    };
    const ProbeSample s = probe_link(rank_ == 0, send, recv);
    // Every message of the probe has been matched, so both ends can start
    // the pair's numbering afresh: the job's own first send is seq 1.
    p2p_send_seq_[size_t(other)] = p2p_recv_seq_[size_t(other)] = 0;
    if (rank_ != 0) continue;
    BRAID_LOG(kInfo, "probed the " << l.kind << " link to rank " << l.peer << ": alpha "
                                   << s.alpha_s * 1e6 << " us, " << s.gbps << " GB/s, reduce "
                                   << s.reduce_gbps << " GB/s, core share " << s.core_share);
    // Ranks that shared their cores with other work measured that moment,
    // not the machine: keep what there was, and let a later job probe.
    if (s.core_share < kMinCoreShare) continue;
    text = merge_probe(text, l.kind, s, hostname());
  }
  if (rank_ == 0 && text != cost_text_) {
    const std::string path = default_tuning_path();
    try {
      write_tuning(path, text);
      BRAID_LOG(kInfo, "cost model probed in " << (now_s() - t0) * 1e3 << " ms, cached in "
                                               << path);
    } catch (const std::exception& e) {
      // The job goes on with the probed figures; the next one probes again.
      BRAID_LOG(kWarn, "probed cost parameters not cached: " << e.what());
    }
  }
  if (rank_ == 0) pstore.set_str("cost/probed", text);
  else text = pstore.get_str("cost/probed");
  const bool changed = text != cost_text_;
  cost_text_ = text;
  return changed;
}

void CommImpl::build_topology(Store& pstore, bool with_topology_file) {
  pstore.set_str("host/" + std::to_string(rank_), hostname());
  hosts_.resize(size_t(size_));
  for (int r = 0; r < size_; ++r) hosts_[r] = pstore.get_str("host/" + std::to_string(r));
  if (auto topo = env_str("BRAID_TOPOLOGY"); topo && with_topology_file) {
    // A JSON matrix of link bandwidths between ranks, e.g. from nvidia-smi
    // topo or a cluster description.
    std::ifstream f(*topo);
    if (!f) throw Error(Errc::kInvalidArgument, "BRAID_TOPOLOGY: cannot open " + *topo);
    const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const std::vector<std::vector<double>> bw = parse_bandwidth_matrix(text, *topo);
    if (int(bw.size()) != size_)
      throw Error(Errc::kInvalidArgument, "BRAID_TOPOLOGY " + *topo + " has " +
                                              std::to_string(bw.size()) + " rows for " +
                                              std::to_string(size_) + " ranks");
    ring_ = ring_order_from_bandwidth(bw);
  } else {
    ring_ = ring_order_from_hosts(hosts_);
  }
}

void CommImpl::build_hierarchy() {
  std::vector<std::string> order;  // hosts by first rank
  for (auto& h : hosts_)
    if (std::find(order.begin(), order.end(), h) == order.end()) order.push_back(h);
  int host_idx = int(std::find(order.begin(), order.end(), hosts_[rank_]) - order.begin());
  int local_rank = 0, local_size = 0, max_local = 0;
  for (int r = 0; r < size_; ++r) {
    if (hosts_[r] != hosts_[rank_]) continue;
    if (r < rank_) ++local_rank;
    ++local_size;
  }
  for (auto& h : order) max_local = std::max<int>(max_local, int(std::count(hosts_.begin(), hosts_.end(), h)));
  if (order.size() < 2 || max_local < 2) return;
  CommOptions o = opt_;
  o.timeout = timeout_;
  local_ = std::make_unique<CommImpl>(local_rank, local_size, store_,
                                      prefix_ + "local" + std::to_string(host_idx) + "/", o,
                                      Role::kHierarchy, this);
  if (local_rank == 0)
    leaders_ = std::make_unique<CommImpl>(host_idx, int(order.size()), store_,
                                          prefix_ + "leaders/", o, Role::kHierarchy, this);
}

}  // namespace braid::comm
