// Hierarchical all-reduce (see hierarchical.cc for the schedule and cost).
#pragma once

#include "comm/engine/comm_impl.h"

namespace braid::comm::algo {

// `local`: this host's ranks; `leaders`: one rank per host (null unless this
// rank is its host's leader). c describes the outer call (dtype, op, size).
void all_reduce_hier(Context& c, CommImpl& local, CommImpl* leaders, const void* send,
                     void* recv, size_t count);

}  // namespace braid::comm::algo
