// Spare servers in `braid ps train --replicas R --spare-servers N`, over the
// library's protocol (braid/ps_spare.h): which ranks are spares, what they
// print, and the done record's "joins".
//
// Ranks: with --placement dedicated the spares are the last N ranks, after
// the W workers and the S servers (W + S + N in all). A spare marks its
// death survivable (braid/survivable.h), stands by, and after a join
// serves like any other server until every worker has said goodbye.
//
// Worker 0, once it has trained every step, waits (within --ps-timeout)
// until every chain has R live members or every spare is used, and every
// claimed join has reported; then it tells the idle spares to exit. A
// server that dies after that is not replaced (the job is finishing).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "braid/ps.h"
#include "braid/ps_spare.h"
#include "ps_train.h"

namespace braid::tool {

// Spare `spare` (0-based among the spares): stands by, joins, serves; 0
// when the job ends. Throws what the join throws (after reporting it).
int run_ps_spare(const Job& job, const PsFlags& f, int spare, const ps::StartJoiner& start);

// Worker 0, after its last step: the wait described above (await_joins),
// then stops the idle spares.
void await_spares(const Job& job, const PsFlags& f);
// The wait alone: until every chain has R live members or every spare is
// used, and every claimed join has reported; a warning on stderr when
// --ps-timeout runs out first.
void await_joins(const Job& job, const PsFlags& f);

// The done record's "joins": every spare's report, in claim order, each
// with "rejoin_s" (from the death's stamp to the last join) where `died`
// has the replaced server's stamp (--kill-server, ps_faults.h).
nlohmann::json spare_joins(const Job& job, const std::map<int, double>& died);

}  // namespace braid::tool
