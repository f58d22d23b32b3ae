// Spare parameter servers: processes that stand by and, when a server dies,
// join every chain it was in by state transfer, so each chain is back to R
// members (docs/PS.md, "Joins"). `braid ps train --spare-servers N` runs
// them; a program of its own can too.
//
// A spare polls the job's store for servers declared dead. For each one no
// spare has claimed yet it claims it (the first claim wins), takes a fresh
// replacement id and starts a Server joining, one after another, every
// shard whose chain the dead server was configured in and that is short of
// R live members; then it publishes a SpareReport and serves like any other
// server. One spare replaces one dead server; a second death takes a
// second spare. A chain that lost every member cannot be rejoined (nothing
// holds its state): its workers fail the job as without spares.
//
// Store keys (all under "ps/spare"): "ps/spares/used" (claims made),
// "ps/spare/claimed/<i>" (the dead server of claim i),
// "ps/spare/report/<p>" (the join in place of dead server p),
// "ps/spares/stop" (idle spares exit).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "braid/ps_server.h"
#include "braid/store.h"

namespace braid::ps {

// The job's chains, as spares and reports need them.
struct SpareJob {
  int servers = 1;   // S, the job's original servers
  int replicas = 2;  // R (spares need chains: R >= 2)
  int spares = 0;    // spares the job runs
  std::shared_ptr<Store> store;
};

// One spare's join: which spare (0-based, and its rank in the job), the
// replacement id it took, the dead server it replaced, when the joins
// ended (wall-clock seconds) and each chain's JoinReport; or the error
// that stopped it.
struct SpareReport {
  int spare = 0, rank = 0, id = -1, replaced = -1;
  double joined_at = 0;
  std::vector<JoinReport> shards;
  std::string error;
};

// Starts a Server under replacement id `id` joining `shards` (its options'
// join list), or throws.
using StartJoiner =
    std::function<std::unique_ptr<Server>(int id, const std::vector<int>& shards)>;

// Stands by as spare `spare` (job rank `rank`) until a death to claim, or
// until stop_spares: then returns null. After a claim, starts the joining
// server with `start`, publishes its SpareReport (also when the join throws,
// which it then rethrows), copies it to *report when given, and returns
// the server, which serves until its workers are done
// (Server::wait_finished). Polls the store every 5 ms.
std::unique_ptr<Server> stand_by_as_spare(const SpareJob& job, int spare, int rank,
                                          const StartJoiner& start,
                                          SpareReport* report = nullptr);

// Waits, within `timeout`, until every chain has R live members or every
// spare is used, and every claimed join has reported. Returns false (and
// waits no longer) when the timeout passed first; `used` gets the claims.
bool await_spare_joins(const SpareJob& job, std::chrono::milliseconds timeout, int64_t* used);

// Tells the spares still standing by to return.
void stop_spares(Store& store);

// Every published SpareReport, in claim order.
std::vector<SpareReport> spare_reports(Store& store);
// A report as the JSON object the store keeps it as: spare, rank,
// replaced, id (once taken), then error, or joined_at and shards [{shard,
// tail, epoch, pause_s, open_rounds}].
std::string spare_report_json(const SpareReport& r);

// Each shard's live chain as the store records it now, head first (a
// shard whose every member died: empty).
std::vector<std::vector<int>> live_chains(const SpareJob& job);
// The servers declared dead, original or replacement, in id order.
std::vector<int> dead_servers(const SpareJob& job);

}  // namespace braid::ps
