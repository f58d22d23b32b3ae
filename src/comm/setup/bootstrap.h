// Bootstrap internals (the contract is include/braid/job.h): the host:port
// and Slurm node-list parsers every launcher's reader shares.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "braid/job.h"

namespace braid::comm {

using braid::bootstrap_from_env;
using braid::JobEnv;
using braid::launched_job;
using braid::LaunchedJob;

// "host:port" or "[v6addr]:port" -> (host, port). Throws
// Error(kInvalidArgument) naming `what` (e.g. the variable) on bad input.
std::pair<std::string, int> parse_host_port(const std::string& s, const std::string& what);

// The first host of a Slurm node list: "n[01-04,07],m" -> "n01".
std::string first_slurm_host(const std::string& nodelist);

}  // namespace braid::comm
