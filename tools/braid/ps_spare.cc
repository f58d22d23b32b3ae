#include "ps_spare.h"

#include <chrono>
#include <cstdio>
#include <string>

#include "braid/survivable.h"

namespace braid::tool {

namespace {

ps::SpareJob spare_job(const Job& job, const PsFlags& f) {
  return {f.servers, f.replicas, f.spare_servers, job.store};
}

}  // namespace

int run_ps_spare(const Job& job, const PsFlags& f, int spare, const ps::StartJoiner& start) {
  launch::mark_survivable(*job.store, job.rank,
                          "spare parameter server " + std::to_string(spare) +
                              ": the chains it joins are also kept by other servers (--replicas " +
                              std::to_string(f.replicas) + ")");
  ps::SpareReport r;
  std::unique_ptr<ps::Server> srv =
      ps::stand_by_as_spare(spare_job(job, f), spare, job.rank, start, &r);
  if (!srv) return 0;  // the job finished with no death to replace
  if (!f.quiet)
    std::fprintf(stderr, "braid ps: spare server %d joined as server %d in place of server %d\n",
                 spare, r.id, r.replaced);
  srv->wait_finished(std::chrono::hours(24 * 7));
  return 0;
}

void await_spares(const Job& job, const PsFlags& f) {
  if (f.spare_servers == 0) return;
  await_joins(job, f);
  ps::stop_spares(*job.store);
}

void await_joins(const Job& job, const PsFlags& f) {
  if (f.spare_servers == 0) return;
  int64_t used = 0;
  if (!ps::await_spare_joins(spare_job(job, f),
                             std::chrono::milliseconds(int64_t(f.timeout_s * 1000)), &used))
    std::fprintf(stderr,
                 "braid ps: warning: a chain is short of %d members and no spare joined it "
                 "within --ps-timeout (%lld of %d spares used)\n",
                 f.replicas, (long long)used, f.spare_servers);
}

nlohmann::json spare_joins(const Job& job, const std::map<int, double>& died) {
  nlohmann::json out = nlohmann::json::array();
  for (const ps::SpareReport& r : ps::spare_reports(*job.store)) {
    nlohmann::json j = nlohmann::json::parse(ps::spare_report_json(r));
    auto it = died.find(r.replaced);
    if (r.error.empty() && it != died.end()) j["rejoin_s"] = r.joined_at - it->second;
    out.push_back(j);
  }
  return out;
}

}  // namespace braid::tool
