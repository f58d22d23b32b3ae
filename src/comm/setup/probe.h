// Measuring a link for the cost model, at communicator creation or with
// `braid bench --probe`.
//
// The selector's α, β and γ are not raw hardware figures: its formulas and
// their built-in values were fitted together, against measured algorithm
// times on this project's reference VM (see select.cc). A probe's raw
// numbers (8-byte and 16 MiB ping-pongs, an 8 MiB in-place sum) are
// therefore not used as they are. They are compared with what the same
// probe measured on the reference VM, and the built-in values are scaled by
// that ratio: a machine whose link moves bytes twice as fast gets half the
// built-in β, and on the reference VM the probe gives back the built-in
// values (within its noise).
//
// A world communicator probes when rank 0 has no cached figures for a
// link class the job uses (see probe_plan), once per machine: the result
// goes to the tuning cache, which later jobs read. The link between hosts
// ("net") is probed once per cache, at the first job that spans hosts:
// where host pairs differ, the first pair's figures stand until
// `braid bench --probe` runs again.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "braid/tuning.h"
#include "comm/algo/select.h"

namespace braid::comm {

// The probe's figures on the reference VM (2 vCPUs), per
// link class ("net" has TCP's), which the built-in CostParams correspond to.
ProbeSample reference_probe(const std::string& kind);

// Which links a new world communicator should probe: for each link class
// the job uses ("shm", "tcp" on one host, "net" between hosts;
// peer_of_kind: class → rank 0's lowest peer over it),
// those the tuning text has no entry for. Empty when BRAID_TUNING names a
// file (the user chose the figures), BRAID_PROBE=0, the job has one rank,
// or a host runs more ranks than it has cores (a sleeping rank's wake-ups
// would be measured, not the link).
struct ProbeLink {
  std::string kind;
  int peer = -1;
};
std::vector<ProbeLink> probe_plan(const std::string& text,
                                  const std::vector<ProbeLink>& peer_of_kind, int size,
                                  int max_local, int cores);
// "shm:1,tcp:4" and back (through the store). parse_plan throws
// Error(kProtocol) for an entry whose rank is not a number >= 0.
std::string format_plan(const std::vector<ProbeLink>& plan);
std::vector<ProbeLink> parse_plan(const std::string& s);

}  // namespace braid::comm
