// Lost workers: a worker whose connection closed before its goodbye
// (ShardState::detach) and that has not come back within the grace below.
// A SIGKILLed worker runs no error path and posts nothing; only the kernel
// closing its sockets tells. Under launchers that end the job on a rank's
// death this is moot; under those that let the others run on (mpirun
// --enable-recovery), without it the servers would wait for the goodbye,
// and worker 0 for the final counters, until --ps-timeout or forever.
//
// Judged per worker over the job, not per connection: a live worker closes
// its connection to a live server only when it counts that server dead
// (a fail-over, ps/replication/chain.h: it declares the death in the store right after
// closing), so a drop with this server alive in the chain view at the end
// of the grace is a lost worker. Then every shard here fails with a reason
// naming the worker, this server and the shard, so each waiting request
// and each later one gets it as its error (the request's own description
// names the operation); and the reason goes to the store, where every other
// server picks it up within a poll, so a worker waiting on any server
// learns who was lost. The job fails: a missing worker's updates are never
// silently left out. The first verdict posted is the job's.
#include "braid/env.h"
#include "braid/log.h"
#include "ps/server/server_impl.h"

namespace braid::ps {

namespace {
constexpr int64_t kGraceNs = 2'000'000'000;  // at most; a quarter of the timeout below
constexpr int64_t kPollNs = 250'000'000;     // how often the store is asked
const std::string kLostKey = "ps/lost_worker", kLostClaim = "ps/lost_worker_claim";
}  // namespace

void Server::Impl::check_lost() {
  const int64_t now = int64_t(now_ns());
  if (lost || now < next_lost_check) return;
  next_lost_check = now + kPollNs;
  const int64_t grace =
      std::min<int64_t>(kGraceNs, std::chrono::nanoseconds(opt.timeout).count() / 4);
  std::string why;
  try {
    for (auto& [id, sh] : shards) {
      const auto drops = sh->state->dropped_before(now - grace);
      if (drops.empty()) continue;
      view.refresh();
      if (view.dead(opt.rank)) return;  // out of the job: its drops are walk-aways
      const ShardState::Drop& d = drops.front();
      why = "worker " + std::to_string(d.worker) + " was lost at clock " +
            std::to_string(d.clock) + ": its connection to parameter server " +
            std::to_string(opt.rank) + " (shard " + std::to_string(id) +
            ") closed without a goodbye";
      if (store->add(kLostClaim, 1) == 1)
        store->set_str(kLostKey, why);
      break;
    }
    if (why.empty() && store->check(kLostKey)) why = store->get_str(kLostKey);
  } catch (const Error&) {
    // The store is gone (the job is ending): a verdict found here still stands.
    if (why.empty()) return;
  }
  if (why.empty()) return;
  lost = true;
  BRAID_LOG(kWarn, "parameter server " << opt.rank << ": " << why << "; failing the job");
  for (auto& [id, sh] : shards) sh->state->fail(why);
}

}  // namespace braid::ps
