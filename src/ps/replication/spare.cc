// Spare servers (braid/ps_spare.h). Why spares poll the store rather than
// wait on a key: a death is recorded under its server's key (ps/dead/<p>),
// and which server dies is unknown.
#include "braid/ps_spare.h"

#include <nlohmann/json.hpp>
#include <chrono>
#include <thread>

#include "braid/env.h"
#include "braid/error.h"
#include "ps/replication/chain.h"
#include "ps/server_name.h"

namespace braid::ps {

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
int claim_a_death(Store& store, ChainView& view) {
  view.refresh();
  for (int p : server_ids(store, view.servers())) {
    if (!view.dead(p) || store.check(claim_key(p))) continue;
    if (store.add(claim_key(p), 1) != 1) continue;  // another spare was first
    store.set_str(claimed_key(store.add(kUsed, 1) - 1), std::to_string(p));
    return p;
  }
  return -1;
}

nlohmann::json report_json(const SpareReport& r) {
  nlohmann::json j = {{"spare", r.spare}, {"rank", r.rank}, {"replaced", r.replaced}};
  if (r.id >= 0) j["id"] = r.id;
  if (!r.error.empty()) {
    j["error"] = r.error;
    return j;
  }
  j["joined_at"] = r.joined_at;
  nlohmann::json shards = nlohmann::json::array();
  for (const JoinReport& s : r.shards)
    shards.push_back({{"shard", s.shard}, {"tail", s.tail}, {"epoch", s.epoch},
                      {"pause_s", s.pause_s}, {"open_rounds", s.open_rounds}});
  j["shards"] = shards;
  return j;
}

SpareReport from_json(const nlohmann::json& j) {
  SpareReport r;
  r.spare = j.at("spare");
  r.rank = j.at("rank");
  r.replaced = j.at("replaced");
  r.id = j.value("id", -1);
  r.error = j.value("error", "");
  r.joined_at = j.value("joined_at", 0.0);
  for (const auto& s : j.value("shards", nlohmann::json::array())) {
    JoinReport jr;
    jr.shard = s.at("shard");
    jr.tail = s.at("tail");
    jr.epoch = s.at("epoch");
    jr.pause_s = s.at("pause_s");
    jr.open_rounds = s.value("open_rounds", int64_t(0));
    r.shards.push_back(jr);
  }
  return r;
}

}  // namespace

std::unique_ptr<Server> stand_by_as_spare(const SpareJob& job, int spare, int rank,
                                          const StartJoiner& start, SpareReport* out) {
  Store& store = *job.store;
  ChainView view(job.servers, job.replicas, job.store);
  int dead = -1;
  while ((dead = claim_a_death(store, view)) < 0) {
    if (store.check(kStop)) return nullptr;
    std::this_thread::sleep_for(kPoll);
  }
  SpareReport report;
  report.spare = spare;
  report.rank = rank;
  report.replaced = dead;
  std::unique_ptr<Server> srv;
  try {
    std::vector<int> shards;
    for (int s : view.shards_with(dead))
      if (int(view.chain(s).size()) < view.replicas()) shards.push_back(s);
    BRAID_CHECK_ARG(!shards.empty(), "spare parameter server " + std::to_string(spare) +
                                         ": every chain of dead " + server_name(dead) +
                                         " already has " + std::to_string(job.replicas) +
                                         " members");
    report.id = replacement_id(store, job.servers);
    srv = start(report.id, shards);
  } catch (const Error& e) {
    report.error = e.what();
    store.set_str(report_key(dead), report_json(report).dump());
    throw;
  }
  report.joined_at = wall_s();
  report.shards = srv->joins();
  store.set_str(report_key(dead), report_json(report).dump());
  if (out) *out = report;
  return srv;
}

bool await_spare_joins(const SpareJob& job, std::chrono::milliseconds timeout, int64_t* used) {
  Store& store = *job.store;
  ChainView view(job.servers, job.replicas, job.store);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    view.refresh();
    bool short_chain = false;
    for (int s = 0; s < job.servers; ++s)
      short_chain = short_chain || int(view.chain(s).size()) < job.replicas;
    *used = store.add(kUsed, 0);
    bool reported = true;
    for (int64_t i = 0; i < *used && reported; ++i)
      reported = store.check(claimed_key(i)) &&
                 store.check(report_key(std::stoi(store.get_str(claimed_key(i)))));
    if ((!short_chain || *used >= job.spares) && reported) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(kPoll);
  }
}

void stop_spares(Store& store) { store.set_str(kStop, "1"); }

std::string spare_report_json(const SpareReport& r) { return report_json(r).dump(); }

std::vector<SpareReport> spare_reports(Store& store) {
  std::vector<SpareReport> out;
  const int64_t used = store.add(kUsed, 0);
  for (int64_t i = 0; i < used; ++i) {
    if (!store.check(claimed_key(i))) continue;
    const int p = std::stoi(store.get_str(claimed_key(i)));
    if (!store.check(report_key(p))) continue;
    out.push_back(from_json(nlohmann::json::parse(store.get_str(report_key(p)))));
  }
  return out;
}

std::vector<std::vector<int>> live_chains(const SpareJob& job) {
  ChainView view(job.servers, job.replicas, job.store);
  std::vector<std::vector<int>> out;
  for (int s = 0; s < job.servers; ++s) {
    try {
      out.push_back(view.chain(s));
    } catch (const Error&) {
      out.emplace_back();  // every member died
    }
  }
  return out;
}

std::vector<int> dead_servers(const SpareJob& job) {
  ChainView view(job.servers, job.replicas, job.store);
  std::vector<int> out;
  for (int p : server_ids(*job.store, job.servers))
    if (view.dead(p)) out.push_back(p);
  return out;
}

}  // namespace braid::ps
