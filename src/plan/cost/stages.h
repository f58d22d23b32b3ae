// The per-stage costs of one layout (plan_cost.h's estimate, estimate.cc):
// what one virtual stage does with one micro-batch -- its parameters, its
// forward and backward time with the tp collectives in them, what it keeps
// for backward -- and the collectives of a process group, priced once each.
// The rules and what they leave out are in docs/PLAN.md.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "braid/plan_cost.h"

namespace braid::plan {

// Bytes one rank sends in a collective of natural size N over n ranks
// (nccl-tests' bus bytes).
inline double bus_bytes(const std::string& op, double N, int n) {
  if (n <= 1) return 0;
  if (op == "all_reduce") return 2.0 * (n - 1) / n * N;
  if (op == "send") return N;
  return double(n - 1) / n * N;  // all_gather, reduce_scatter
}

struct Priced {
  double s = 0, bytes = 0;
};

// A group's collectives, priced once per (op, bytes).
class Group {
 public:
  Group(const Cluster& c, int size, int stride, std::string role, Estimate& e)
      : p_(place_group(c, size, stride)), role_(std::move(role)), e_(e) {}
  Priced operator()(const std::string& op, double bytes) {
    if (p_.links.ranks <= 1 || bytes <= 0) return {};
    const comm::CollectivePrice r = comm::price_collective(op, size_t(bytes), p_.links);
    // The algorithm reported for an op is that of its largest call.
    double& largest = largest_[op];
    if (bytes >= largest) {
      largest = bytes;
      e_.algorithms[role_ + " " + op] = r.algorithm;
      e_.call_bytes[role_ + " " + op] = bytes;
    }
    return {r.seconds, bus_bytes(op, bytes, p_.links.ranks)};
  }
  const std::string& link() const { return p_.link_class; }
  int size() const { return p_.links.ranks; }

 private:
  Placement p_;
  std::string role_;
  Estimate& e_;
  std::map<std::string, double> largest_;
};

// What one virtual stage does with one micro-batch.
struct Stage {
  double params = 0;          // this rank's share (÷ tp)
  double fwd = 0, bwd = 0;    // seconds, tp communication included
  double fwd_own = 0, bwd_own = 0;  // the same on a core of its own (no time-sharing)
  double tp_fwd = 0, tp_bwd = 0;  // the tp communication in them
  double tp_bytes = 0;        // bus bytes of that communication
  double act = 0;             // bytes stored for backward
  double work = 0;            // transient bytes while it runs (full recomputation)
  double re_flops = 0;        // FLOPs recomputation adds (this rank's share)
};

// A GPT's S = pp × l.virtual_stages stages (stage v on rank v % pp) for a
// micro-batch of l.mbs sequences, with its tp collectives priced on `tpg`;
// `share`: compute stretched by time-shared cores. blocks_on[r]: the blocks
// on pipeline rank r.
std::vector<Stage> gpt_stages(const ModelDesc& m, const Device& dev, const Layout& l, double share, Group& tpg,
                              std::vector<double>& blocks_on);
// Any other model as one stage (layouts of tp = pp = 1).
Stage layer_stage(const ModelDesc& m, const Device& dev, const Layout& l, double share);

}  // namespace braid::plan
