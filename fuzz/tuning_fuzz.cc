// The tuning cache (braid/tuning.h, comm/setup/probe.h) and the topology
// file (braid/topology.h), JSON a user or an earlier job wrote: the input
// goes through parse_cost_params (what every communicator reads the cache
// with), probe_plan and merge_probe (what the link probe reads and
// rewrites it with), parse_plan (the probe plan rank 0 publishes in the
// store), and parse_bandwidth_matrix + ring_order_from_bandwidth (what
// BRAID_TOPOLOGY is read with).
#include <string>
#include <vector>

#include "braid/error.h"
#include "braid/topology.h"
#include "braid/tuning.h"
#include "comm/setup/probe.h"
#include "fuzz_target.h"

BRAID_FUZZ_TARGET(tuning) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    braid::comm::parse_cost_params(text, "fuzz.json");
  } catch (const braid::Error&) {
  }
  try {
    const std::vector<braid::comm::ProbeLink> peers{{"shm", 1}, {"tcp", 2}, {"net", 3}};
    braid::comm::probe_plan(text, peers, 4, 4, 8);
    braid::comm::ProbeSample s = braid::comm::reference_probe("shm");
    braid::comm::merge_probe(text, "shm", s, "fuzz-host");
  } catch (const braid::Error&) {
  }
  try {
    braid::comm::parse_plan(text);
  } catch (const braid::Error&) {
  }
  try {
    const auto bw = braid::parse_bandwidth_matrix(text, "fuzz.json");
    // The exact search is exponential in the ranks (at most 16): a job's
    // own size bounds it, the fuzzer's input does not.
    if (bw.size() <= 12) braid::ring_order_from_bandwidth(bw);
  } catch (const braid::Error&) {
  }
}
