// Algorithm selection by an α-β cost model.
//
// For each collective, every algorithm that applies is priced with its
// formula (see the top comment of its file in src/comm/algo/) and the
// cheapest wins. α (latency per message), β (seconds per byte) and γ
// (reduction seconds per byte) depend on the transport kind; they come from
// defaults measured on this project's machines, or from a tuning file
// (JSON {"shm":{"alpha_us":..,"gbps":..}, "tcp":{...}, "reduce_gbps":..}):
// BRAID_TUNING, or the cache that a communicator's probe at creation and
// `braid bench --probe` fill with calibrated figures (comm/probe.h).
// Overrides: BRAID_ALGO=all_reduce:ring,broadcast:tree and
// Communicator::set_algorithm. BRAID_DETERMINISTIC=1 forces the rank-order
// algorithms for reductions (direct; for a small all_reduce, oneshot), over
// any override naming another (rank-order folding, bitwise reproducible).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "braid/env.h"
#include "comm/transport/transport.h"

namespace braid::comm {

struct LinkCost {
  double alpha_s = 1e-6;      // per message
  double beta_s_per_b = 1e-10;  // per byte
};

struct CostParams {
  LinkCost shm{1.0e-6, 1.0 / 9e9};
  LinkCost tcp{20e-6, 1.0 / 3.5e9};
  double gamma_s_per_b = 1.0 / 10e9;  // reduction
};

// The tuning file's text: BRAID_TUNING if set (an error if unreadable),
// else the probe's cache ($XDG_CACHE_HOME or
// ~/.cache/braid/tuning.json) if present, else "" (the built-in defaults).
std::string read_tuning();
// The text of the tuning file at `path`, or "" if it cannot be opened.
std::string read_tuning_file(const std::string& path);
// Cost parameters from a tuning file's text ("": the defaults); `from`
// names the file in errors. The same text gives the same bits everywhere.
CostParams parse_cost_params(const std::string& text, const std::string& from);
std::string default_tuning_path();

class Selector {
 public:
  // hosts > 1 enables the hierarchical all-reduce (max_local ranks per host);
  // all_shm (every peer over shared memory) the chain all-reduce. cores: of
  // a host, to tell whether its ranks outnumber them.
  Selector(int size, bool any_tcp, CostParams p, int hosts = 1, int max_local = 1,
           bool all_shm = false, int cores = usable_cores());
  // Parses BRAID_ALGO; throws Error(kInvalidArgument) on an unknown name.
  void load_env_overrides();
  void set_override(const std::string& collective, const std::string& algo);
  // The algorithm to run for `op` moving `bytes` (the collective's natural
  // size: the buffer for all_reduce/broadcast/reduce, the whole output for
  // all_gather, the whole input for reduce_scatter).
  const std::string& choose(CollOp op, size_t bytes, DType t) const;
  // Predicted seconds of `algo` for `op` (inf if it does not apply).
  double predict(CollOp op, const std::string& algo, size_t bytes) const;
  static const std::vector<std::string>& algorithms_for(CollOp op);
  bool deterministic() const { return deterministic_; }
  // True if BRAID_ALGO or set_algorithm forced an algorithm for `op`.
  bool overridden(CollOp op) const { return overrides_.count(op) != 0; }

 private:
  const std::string& rank_order(CollOp op, size_t bytes) const;
  // More ranks on a host than it has cores.
  bool oversubscribed() const { return max_local_ > cores_; }
  int n_;
  LinkCost link_, shm_;
  double gamma_;
  int hosts_, max_local_;
  bool all_shm_;
  int cores_;  // usable cores of a host
  bool deterministic_;
  std::map<CollOp, std::string> overrides_;
};

CollOp parse_coll_op(const std::string& name);  // "all_reduce" → kAllReduce

}  // namespace braid::comm
