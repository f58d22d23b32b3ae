// A shard's state on disk, as free functions over its parts: the
// checkpoint (format: include/braid/ps_checkpoint.h; shard_checkpoint.cc)
// and the state transfer to a server joining its chain (the checkpoint
// plus the live state a checkpoint leaves out; shard_transfer.cc). Each is
// called under the shard's mutex (shard/shard_state.h). Private to src/ps.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "braid/checkpoint.h"
#include "braid/ps.h"
#include "ps/consistency/rounds.h"
#include "ps/replication/write_dedup.h"
#include "ps/shard/param_store.h"
#include "ps/shard/reports.h"
#include "ps/shard/roster.h"

namespace braid::ps {

// The shard at `step` closed rounds as a checkpoint of views into `store`
// (valid while it is unchanged; `rows` holds the sparse row ids).
Checkpoint shard_checkpoint(const ParamStore& store, const ServerOptions& opt, int64_t step,
                            std::vector<std::vector<int64_t>>& rows);
// Writes the shard's checkpoint when `step` is due (save_every, save_last)
// and `saves` (when set) says this replica writes it: in a chain, its live
// head does, so a shard keeps being saved after its home server died.
void save_if_due(const ParamStore& store, const ServerOptions& opt, int64_t step,
                 const std::function<bool()>& saves);
// Reads the save in `step_dir` into `store`, re-cut when another server
// count saved it; returns its step (closed rounds).
int64_t restore_shard(ParamStore& store, const ServerOptions& opt, const std::string& step_dir);
// One shard file `ck` (read from `path`) saved by a job of this server count.
int64_t restore_shard_file(ParamStore& store, const ServerOptions& opt, const Checkpoint& ck,
                           const std::string& path);

// The live state (shard_transfer.cc): added to a checkpoint, and installed
// from one. Traffic counters stay each server's own.
void add_live(Checkpoint& ck, const Rounds& rounds, const Roster& roster, const WriteDedup& dedup,
              const Reports& reports);
void restore_live(const Checkpoint& ck, const std::string& path, const Layout& layout, int workers,
                  Rounds& rounds, Roster& roster, WriteDedup& dedup, Reports& reports);

}  // namespace braid::ps
