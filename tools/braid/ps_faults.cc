// Why the kill goes through the store rather than a signal from worker 0:
// under braid run, mpirun or srun a worker knows neither the server's pid
// nor its host; every rank shares the store.
#include "ps_faults.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <cstdlib>
#include <optional>

#include "braid/env.h"
#include "braid/error.h"
#include "braid/ps_spare.h"
#include "braid/survivable.h"
#include "ps_spare.h"

namespace braid::tool {

namespace {

std::string kill_key(int server) { return "ps/fault/kill/" + std::to_string(server); }
std::string died_key(int server) { return "ps/fault/died/" + std::to_string(server); }
std::string acked_key(int worker) { return "ps/fault/acked/" + std::to_string(worker); }

}  // namespace

namespace {

// "A:B" with 0 <= A < limit and B >= 0, or nothing.
std::optional<std::pair<int, int64_t>> parse_pair(const std::string& s, long limit) {
  const size_t colon = s.find(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == s.size()) return std::nullopt;
  char *end1 = nullptr, *end2 = nullptr;
  const long a = std::strtol(s.c_str(), &end1, 10);
  const long long b = std::strtoll(s.c_str() + colon + 1, &end2, 10);
  if (end1 != s.c_str() + colon || !end2 || *end2 || a < 0 || a >= limit || b < 0)
    return std::nullopt;
  return std::make_pair(int(a), int64_t(b));
}

// --kill-worker / --hold-worker: WORKER:STEP, or nothing when not given.
std::optional<WorkerKill> parse_worker_step(const char* flag, const std::string& s, int workers) {
  if (s.empty()) return std::nullopt;
  const auto at = parse_pair(s, workers);
  if (!at)
    throw Error(Errc::kInvalidArgument,
                std::string(flag) + " '" + s + "': expected WORKER:STEP with 0 <= WORKER < "
                "--workers (" + std::to_string(workers) + ") and STEP >= 0");
  return WorkerKill{at->first, at->second};
}

}  // namespace

std::vector<KillAt> parse_kill_server(const PsFlags& f) {
  std::vector<KillAt> out;
  for (const std::string& s : f.kill_server) {
    const auto at = parse_pair(s, f.servers);
    if (!at)
      throw Error(Errc::kInvalidArgument,
                  "--kill-server '" + s + "': expected SERVER:STEP with 0 <= SERVER < --servers (" +
                      std::to_string(f.servers) + ") and STEP >= 0");
    out.push_back({at->first, at->second});
  }
  BRAID_CHECK_ARG(out.empty() || f.placement == "dedicated",
                  "--kill-server needs --placement dedicated: a colocated server is also a "
                  "worker, whose death ends the job");
  return out;
}

std::optional<WorkerKill> parse_kill_worker(const PsFlags& f) {
  return parse_worker_step("--kill-worker", f.kill_worker, f.workers);
}

std::optional<WorkerKill> parse_hold_worker(const PsFlags& f) {
  auto at = parse_worker_step("--hold-worker", f.hold_worker, f.workers);
  BRAID_CHECK_ARG(!at || (f.consistency == "ssp" && f.workers >= 2),
                  "--hold-worker needs --consistency ssp and --workers >= 2 (the others read "
                  "ahead while it holds)");
  return at;
}

namespace {
std::string reached_key(int worker) { return "ps/fault/hold/reached/" + std::to_string(worker); }
}  // namespace

PushHold::PushHold(const Job& job, const PsFlags& f, int worker, int64_t steps)
    : job_(job),
      hold_(parse_hold_worker(f)),
      pending_(hold_.has_value()),
      staleness_(f.staleness),
      worker_(worker),
      workers_(f.workers),
      timeout_s_(f.timeout_s) {
  if (hold_)
    BRAID_CHECK_ARG(hold_->step + f.staleness < steps,
                    "--hold-worker " + f.hold_worker + ": the others read up to step + staleness, "
                    "which must be a step of the run (0.." + std::to_string(steps - 1) + ")");
}

void PushHold::before_push(int64_t clock) {
  if (!pending_ || hold_->worker != worker_ || clock < hold_->step) return;
  pending_ = false;
  std::vector<std::string> keys;
  for (int o = 0; o < workers_; ++o)
    if (o != worker_) keys.push_back(reached_key(o));
  job_.store->wait(keys, std::chrono::milliseconds(int64_t(timeout_s_ * 1000)));
}

void PushHold::pulled(int64_t clock) {
  if (!pending_ || hold_->worker == worker_ || clock < hold_->step + staleness_) return;
  pending_ = false;
  job_.store->set_str(reached_key(worker_), std::to_string(clock));
}

ServerFaults::ServerFaults(const Job& job, const PsFlags& f, int server) {
  if (f.placement == "dedicated" && f.replicas >= 2)
    launch::mark_survivable(*job.store, job.rank,
                            "parameter server " + std::to_string(server) + ": each of its " +
                                std::to_string(f.replicas) +
                                " shards is also kept by other servers (--replicas " +
                                std::to_string(f.replicas) + ")");
  bool armed = false;
  for (const KillAt& k : parse_kill_server(f)) armed = armed || k.server == server;
  if (!armed) return;
  // Polls rather than blocks in Store::wait, so the destructor can stop it.
  watcher_ = std::thread([this, store = job.store, server] {
    const std::string key = kill_key(server);
    while (!stop_) {
      if (store->check(key)) {
        store->set_str(died_key(server), std::to_string(wall_s()));
        ::raise(SIGKILL);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
}

ServerFaults::~ServerFaults() {
  stop_ = true;
  if (watcher_.joinable()) watcher_.join();
}

FailoverProbe::FailoverProbe(const Job& job, const PsFlags& f, int worker, int64_t steps)
    : job_(job),
      flags_(f),
      servers_(f.servers),
      replicas_(f.replicas),
      spares_(f.spare_servers),
      worker_(worker),
      workers_(f.workers),
      kills_(parse_kill_server(f)),
      kill_me_(parse_kill_worker(f)) {
  if (kill_me_ && kill_me_->worker != worker) kill_me_.reset();
  if (kill_me_)
    BRAID_CHECK_ARG(kill_me_->step < steps, "--kill-worker " + f.kill_worker +
                                                 ": the run has steps 0.." +
                                                 std::to_string(steps - 1));
  for (const KillAt& k : kills_)
    BRAID_CHECK_ARG(k.step < steps, "--kill-server " + std::to_string(k.server) + ":" +
                                        std::to_string(k.step) + ": the run has steps 0.." +
                                        std::to_string(steps - 1));
}

void FailoverProbe::before_push(int64_t clock) {
  // No error path runs: the kernel closes this worker's connections, and
  // nothing says goodbye (ps/shard/roster.h: a lost worker).
  if (kill_me_ && clock >= kill_me_->step) ::raise(SIGKILL);
  if (worker_ != 0) return;
  for (const KillAt& k : kills_) {
    // At STEP or, where k-of-n moved this worker's clock past it, the
    // first push after; each kill once.
    auto done = [&](const Measured& m) { return m.at.server == k.server; };
    if (k.step > clock || std::any_of(done_.begin(), done_.end(), done)) continue;
    // One failure at a time: an earlier death's spare has joined first.
    if (!done_.empty()) await_joins(job_, flags_);
    job_.store->set_str(kill_key(k.server), "1");
    // Polled finely (not Store::wait, whose back-off reaches 10 ms): the
    // time from the death to this push counts in the fail-over time.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!job_.store->check(died_key(k.server))) {
      if (std::chrono::steady_clock::now() > deadline)
        throw Error(Errc::kTimeout, "--kill-server " + std::to_string(k.server) + ":" +
                                        std::to_string(k.step) + ": server " +
                                        std::to_string(k.server) + " did not die within 60 s");
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    done_.push_back({{k.server, clock}, std::stod(job_.store->get_str(died_key(k.server)))});
  }
  push_started_ = wall_s();
}

void FailoverProbe::after_push(int64_t clock) {
  const double t = wall_s();
  for (Measured& m : done_)
    if (m.at.step == clock && m.failover_s < 0) {
      m.failover_s = t - m.died;
      m.push_s = t - push_started_;
    }
}

nlohmann::json FailoverProbe::step_fields(int64_t clock) const {
  nlohmann::json out = nlohmann::json::object();
  for (const Measured& m : done_)
    if (m.at.step == clock) {
      out["killed_server"] = m.at.server;
      out["failover_s"] = m.failover_s;
      out["failover_push_s"] = m.push_s;
    }
  return out;
}

void FailoverProbe::publish(const ps::Worker& worker) {
  if (replicas_ < 2 && kills_.empty()) return;
  const ps::WorkerStats ws = worker.worker_stats();
  nlohmann::json j = {{"pushes", ws.pushes_acked}, {"clocks", ws.clocks_acked}};
  job_.store->set_str(acked_key(worker_), j.dump());
}

nlohmann::json FailoverProbe::done_fields(const ps::Worker& worker,
                                          const std::vector<ps::ServerStats>& tails) {
  nlohmann::json out = nlohmann::json::object();
  if (replicas_ < 2 && kills_.empty()) return out;
  const ps::WorkerStats own = worker.worker_stats();
  nlohmann::json failovers = nlohmann::json::array();
  for (const Measured& m : done_)
    failovers.push_back({{"server", m.at.server},
                         {"step", m.at.step},
                         {"failover_s", m.failover_s},
                         {"push_s", m.push_s}});
  out["failovers"] = failovers;
  out["reroutes"] = own.reroutes;
  out["max_reroute_s"] = own.max_reroute_s;
  out["epoch"] = own.epoch;
  // Every worker published before its goodbye, and final_stats (which
  // `tails` come from) waited for every goodbye.
  std::vector<int64_t> pushes(size_t(servers_), 0), clocks(size_t(servers_), 0);
  for (int w = 0; w < workers_; ++w) {
    job_.store->wait({acked_key(w)}, std::chrono::seconds(60));
    const nlohmann::json j = nlohmann::json::parse(job_.store->get_str(acked_key(w)));
    for (int s = 0; s < servers_; ++s) {
      pushes[size_t(s)] += j.at("pushes").at(size_t(s)).get<int64_t>();
      clocks[size_t(s)] += j.at("clocks").at(size_t(s)).get<int64_t>();
    }
  }
  nlohmann::json chains = nlohmann::json::array();
  for (int s = 0; s < servers_; ++s) {
    const ps::ServerStats& t = tails.at(size_t(s));
    chains.push_back({{"shard", s},
                      {"pushes_acked", pushes[size_t(s)]},
                      {"tail_pushes_accepted", t.pushes_accepted},
                      {"clocks_acked", clocks[size_t(s)]},
                      {"tail_rounds_closed", t.rounds_closed},
                      {"tail_updates_applied", t.updates_applied},
                      {"tail_writes_duplicate", t.writes_duplicate}});
  }
  const ps::SpareJob chains_now{servers_, replicas_, spares_, job_.store};
  const auto members = ps::live_chains(chains_now);
  for (int s = 0; s < servers_; ++s) chains[size_t(s)]["members"] = members[size_t(s)];
  out["chains"] = chains;
  out["dead_servers"] = ps::dead_servers(chains_now);
  if (spares_ > 0) {
    std::map<int, double> died;
    for (const Measured& m : done_) died[m.at.server] = m.died;
    out["spare_servers"] = spares_;
    out["joins"] = spare_joins(job_, died);
  }
  return out;
}

}  // namespace braid::tool
