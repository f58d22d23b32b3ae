// Algorithm selection by an α-β cost model.
//
// For each collective, every algorithm of the registry (comm/algo/registry.h)
// that can run is priced with its formula (next to its schedule, in its
// file under src/comm/algo/) and the cheapest wins; of equal prices, the
// one the registry lists first. α (latency per message), β (seconds per
// byte) and γ (reduction seconds per byte) depend on the transport kind;
// they come from defaults measured on this project's machines, or from a
// tuning file (JSON {"shm":{"alpha_us":..,"gbps":..}, "tcp":{...},
// "reduce_gbps":..}): BRAID_TUNING, or the cache that a communicator's probe
// at creation and `braid bench --probe` fill with calibrated figures
// (comm/setup/probe.h).
// Rules before the prices, in this order:
// - a call whose buffer lies in alloc_shared memory runs "shared", unless an
//   override names another algorithm;
// - BRAID_DETERMINISTIC=1 forces the rank-order algorithms for reductions
//   (direct; for a small all_reduce, oneshot), over any override naming
//   another (rank-order folding, bitwise reproducible);
// - an override (BRAID_ALGO=all_reduce:ring,broadcast:tree, or
//   Communicator::set_algorithm) runs the algorithm it names; if that one
//   cannot run for the call, the call fails with Error(kInvalidArgument)
//   saying why, rather than run another;
// - f16/bf16 reductions of more than two ranks fold in rank order.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "braid/env.h"
#include "braid/tuning.h"
#include "comm/algo/registry.h"
#include "comm/transport/transport.h"

namespace braid::comm {

class Selector {
 public:
  // hosts > 1 enables the hierarchical all-reduce (max_local ranks per host);
  // all_shm (every peer over shared memory) the chain all-reduce. cores: of
  // a host, to tell whether its ranks outnumber them.
  // nics: links out of a host (the planner's clusters; a runtime host has one).
  Selector(int size, bool any_tcp, CostParams p, int hosts = 1, int max_local = 1,
           bool all_shm = false, int cores = usable_cores(), int nics = 1);
  // Parses BRAID_ALGO; throws Error(kInvalidArgument) on an unknown name.
  void load_env_overrides();
  // Forces `algo` for `collective` ("auto" or "": the cost model again).
  // Throws Error(kInvalidArgument) naming the valid algorithms if `algo` is
  // not one of the collective's.
  void set_override(const std::string& collective, const std::string& algo);
  // The algorithm to run for `op` moving `bytes` (the collective's natural
  // size: the buffer for all_reduce/broadcast/reduce, the whole output for
  // all_gather, the whole input for reduce_scatter). shared_span: the call's
  // buffer lies in alloc_shared memory. Throws Error(kInvalidArgument) if an
  // override names an algorithm that cannot run here.
  const algo::Algorithm& select(CollOp op, size_t bytes, DType t, bool shared_span = false) const;
  // select's name, for a call whose buffer is private memory.
  const std::string& choose(CollOp op, size_t bytes, DType t) const {
    return select(op, bytes, t).name;
  }
  // Predicted seconds of `algo` for `op` (inf if it does not apply, or if
  // `op` has no algorithm of that name).
  double predict(CollOp op, const std::string& algo, size_t bytes) const;
  double predict(const algo::Algorithm& a, size_t bytes) const;
  // Whether `a` can run on this communicator (shared_span: for a buffer in
  // alloc_shared memory): nullptr if so, else why not.
  const char* why_not(const algo::Algorithm& a, bool shared_span = false) const;
  // The figures this selector prices a call of `bytes` with (its links,
  // γ, the hierarchy, the cores): predict(a, bytes) is a.cost(inputs(bytes))
  // for an algorithm that can run, with more than one rank.
  algo::CostInputs inputs(size_t bytes) const;
  bool deterministic() const { return deterministic_; }
  // The communicator's pipelining chunk (BRAID_CHUNK_BYTES; 1 MiB unless
  // set): a ring's segments are cut into chunks of it, and its formula
  // counts them (CostInputs::chunks).
  void set_chunk_bytes(size_t bytes) { ring_chunk_ = bytes; }
  // True if BRAID_ALGO or set_algorithm forced an algorithm for `op`.
  bool overridden(CollOp op) const { return overrides_.count(op) != 0; }

 private:
  const algo::Algorithm& rank_order(CollOp op, size_t bytes) const;
  // More ranks on a host than it has cores.
  bool oversubscribed() const { return max_local_ > cores_; }
  int n_;
  LinkCost link_, shm_;
  double gamma_;
  int hosts_, max_local_, nics_ = 1;
  bool all_shm_;  // every peer over shared memory, and n > 1
  bool fit_shm_;  // every peer over shared memory (vacuous at n = 1)
  int cores_;  // usable cores of a host
  size_t ring_chunk_ = size_t(1) << 20;
  bool deterministic_;
  std::map<CollOp, const algo::Algorithm*> overrides_;
};

CollOp parse_coll_op(const std::string& name);  // "all_reduce" → kAllReduce

}  // namespace braid::comm
