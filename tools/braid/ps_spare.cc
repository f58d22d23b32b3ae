// Why spares poll the store rather than wait on a key: a death is recorded
// under its server's key (ps/dead/<p>), and which server dies is unknown.
#include "ps_spare.h"

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "braid/error.h"
#include "braid/survivable.h"
#include "ps/chain.h"
#include "ps_faults.h"

namespace braid::tool {

namespace {

constexpr auto kPoll = std::chrono::milliseconds(5);
const std::string kUsed = "ps/spares/used", kStop = "ps/spares/stop";
std::string claim_key(int p) { return "ps/spare/claim/" + std::to_string(p); }
std::string claimed_key(int64_t i) { return "ps/spare/claimed/" + std::to_string(i); }
std::string report_key(int p) { return "ps/spare/report/" + std::to_string(p); }

// Every server id the job has had: the originals and the replacements.
std::vector<int> server_ids(Store& store, int servers) {
  std::vector<int> ids;
  const int64_t replacements = store.add("ps/replacements", 0);
  for (int p = 0; p < servers + int(replacements); ++p) ids.push_back(p);
  return ids;
}

// A dead server no spare has claimed, claimed now by this spare; -1 if none.
int claim_a_death(Store& store, ps::ChainView& view) {
  view.refresh();
  for (int p : server_ids(store, view.servers())) {
    if (!view.dead(p) || store.check(claim_key(p))) continue;
    if (store.add(claim_key(p), 1) != 1) continue;  // another spare was first
    store.set_str(claimed_key(store.add(kUsed, 1) - 1), std::to_string(p));
    return p;
  }
  return -1;
}

}  // namespace

int run_ps_spare(const Job& job, const PsFlags& f, int spare, const StartJoiner& start) {
  Store& store = *job.store;
  launch::mark_survivable(store, job.rank,
                          "spare parameter server " + std::to_string(spare) +
                              ": the chains it joins are also kept by other servers (--replicas " +
                              std::to_string(f.replicas) + ")");
  ps::ChainView view(f.servers, f.replicas, job.store);
  int dead = -1;
  while ((dead = claim_a_death(store, view)) < 0) {
    if (store.check(kStop)) return 0;
    std::this_thread::sleep_for(kPoll);
  }
  nlohmann::json report = {{"spare", spare}, {"rank", job.rank}, {"replaced", dead}};
  std::unique_ptr<ps::Server> srv;
  try {
    std::vector<int> shards;
    for (int s : view.shards_with(dead))
      if (int(view.chain(s).size()) < view.replicas()) shards.push_back(s);
    BRAID_CHECK_ARG(!shards.empty(), "spare parameter server " + std::to_string(spare) +
                                         ": every chain of dead server " + std::to_string(dead) +
                                         " already has " + std::to_string(f.replicas) + " members");
    const int id = ps::replacement_id(store, f.servers);
    report["id"] = id;
    srv = start(id, shards);
  } catch (const Error& e) {
    report["error"] = e.what();
    store.set_str(report_key(dead), report.dump());
    throw;
  }
  report["joined_at"] = wall_clock_s();
  nlohmann::json joins = nlohmann::json::array();
  for (const ps::JoinReport& j : srv->joins())
    joins.push_back({{"shard", j.shard}, {"tail", j.tail}, {"epoch", j.epoch}, {"pause_s", j.pause_s}});
  report["shards"] = joins;
  store.set_str(report_key(dead), report.dump());
  if (!f.quiet)
    std::fprintf(stderr, "braid ps: spare server %d joined as server %d in place of server %d\n",
                 spare, report["id"].get<int>(), dead);
  srv->wait_finished(std::chrono::hours(24 * 7));
  return 0;
}

void await_spares(const Job& job, const PsFlags& f) {
  if (f.spare_servers == 0) return;
  await_joins(job, f);
  job.store->set_str(kStop, "1");
}

void await_joins(const Job& job, const PsFlags& f) {
  if (f.spare_servers == 0) return;
  Store& store = *job.store;
  ps::ChainView view(f.servers, f.replicas, job.store);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(f.timeout_s * 1000));
  for (;;) {
    view.refresh();
    bool short_chain = false;
    for (int s = 0; s < f.servers; ++s) short_chain = short_chain || int(view.chain(s).size()) < f.replicas;
    const int64_t used = store.add(kUsed, 0);
    bool reported = true;
    for (int64_t i = 0; i < used && reported; ++i)
      reported = store.check(claimed_key(i)) &&
                 store.check(report_key(std::stoi(store.get_str(claimed_key(i)))));
    if ((!short_chain || used >= f.spare_servers) && reported) break;
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr,
                   "braid ps: warning: a chain is short of %d members and no spare joined it "
                   "within --ps-timeout (%lld of %d spares used)\n",
                   f.replicas, (long long)used, f.spare_servers);
      break;
    }
    std::this_thread::sleep_for(kPoll);
  }
}

nlohmann::json spare_joins(const Job& job, const std::map<int, double>& died) {
  Store& store = *job.store;
  nlohmann::json out = nlohmann::json::array();
  const int64_t used = store.add(kUsed, 0);
  for (int64_t i = 0; i < used; ++i) {
    if (!store.check(claimed_key(i))) continue;
    const int p = std::stoi(store.get_str(claimed_key(i)));
    if (!store.check(report_key(p))) continue;
    nlohmann::json r = nlohmann::json::parse(store.get_str(report_key(p)));
    auto it = died.find(p);
    if (it != died.end() && r.contains("joined_at"))
      r["rejoin_s"] = r["joined_at"].get<double>() - it->second;
    out.push_back(r);
  }
  return out;
}

}  // namespace braid::tool
