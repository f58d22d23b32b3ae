// Spare servers in `braid ps train --replicas R --spare-servers N`: ranks
// that stand by and, when a server dies, join every chain it was in, so each
// chain is back to R members (src/ps/chain_join.h does the joining).
//
// Ranks: with --placement dedicated the spares are the last N ranks, after
// the W workers and the S servers (W + S + N in all). A spare marks its
// death survivable (braid/survivable.h) and polls the store's chain
// configuration (ps/chain.h). For each server declared dead that no spare
// has claimed yet it claims it ("ps/spare/claim/<p>": the first add wins),
// takes a fresh id (ps::replacement_id) and starts a ps::Server joining, one
// after another, every shard whose chain the dead server was configured in
// (ChainView::shards_with) and that is short of R live members. It then
// publishes its report and serves like any other server until every worker
// has said goodbye. A spare replaces one dead server; a second death takes a
// second spare. A chain that lost every member cannot be rejoined (nothing
// holds its state): the workers fail the job as without spares.
//
// Store keys: "ps/spares/used" (claims made), "ps/spare/claimed/<i>" (the
// dead server of claim i), "ps/spare/report/<p>" (the join of dead server
// p, JSON: spare, rank, id, replaced, joined_at (wall-clock seconds),
// shards [{shard, tail, epoch, pause_s}] or error), "ps/spares/stop".
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
#include "ps_train.h"

namespace braid::tool {

// Starts a server under replacement id `id` joining `shards`.
using StartJoiner = std::function<std::unique_ptr<ps::Server>(int id, const std::vector<int>& shards)>;

// Spare `spare` (0-based among the spares): stands by, joins, serves; 0
// when the job ends. Throws what the join throws (after reporting it).
int run_ps_spare(const Job& job, const PsFlags& f, int spare, const StartJoiner& start);

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
