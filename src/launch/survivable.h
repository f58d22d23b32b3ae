// Ranks whose death does not end the job.
//
// By default a supervisor stops the whole job when any rank fails. A rank
// whose work the job can finish without — a parameter server whose every
// shard is also kept by other servers (ps.h, chain replication) — says so
// in the job's store before it does anything the others rely on. When such
// a rank exits non-zero or is killed, the supervisor writes one line naming
// it and the reason it gave, and the job goes on; the job's status is that
// of the other ranks. Whether the rest of the job can really go on is
// theirs to find out: a worker whose chain lost every member fails, and
// that failure stops the job as any other.
//
// The mark lives under "launch/survivable/<global rank>"; the launchers
// (launch_local for braid run, run_forked) read it only when a rank fails.
#pragma once

#include <optional>
#include <string>

#include "braid/store.h"

namespace braid::launch {

// Records that rank `rank`'s death is survivable, because of `why` (shown
// in the supervisor's line; non-empty).
void mark_survivable(Store& store, int rank, const std::string& why);
// The reason rank `rank` gave, or nothing when it did not mark itself.
std::optional<std::string> survivable_reason(Store& store, int rank);

}  // namespace braid::launch
