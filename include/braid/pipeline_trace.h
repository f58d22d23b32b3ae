// A pipeline step's actions as a Chrome trace (chrome://tracing, Perfetto),
// from every rank's ActionTimings.
#pragma once

#include <string>
#include <vector>

#include "braid/schedule.h"

namespace braid {
class Communicator;
}

namespace braid::parallel {

// Chrome trace JSON ("traceEvents", one complete event per compute or
// communication action, tid = rank, times in µs from the earliest start).
std::string chrome_trace_json(const Schedule& s,
                              const std::vector<std::vector<ActionTiming>>& per_rank);
// Collective over comm: gathers every rank's timings of its last step to
// rank 0, which writes chrome_trace_json to `path` (Error(kIo) if it
// cannot). The ranks' clocks are one clock on one host; across hosts their
// offsets are not corrected.
void write_pipeline_trace(Communicator& comm, const Schedule& s,
                          const std::vector<ActionTiming>& mine, const std::string& path);

}  // namespace braid::parallel
