// braid doctor inside a job: `braid run --nnodes H … braid doctor`,
// `srun braid doctor`, `mpirun … braid doctor`. Each host's first rank runs
// the host sections for the ranks its host has; then the whole job
// measures its links:
//   links           rank 0 probes each link class it has (shared memory or
//                   TCP inside its host, TCP to another host: link_probe.h)
//                   and compares the α and bandwidth it measured with the
//                   figures the cost model holds for that class; figures
//                   more than 2× off (a "net" entry never probed, so still
//                   loopback's) are a warning, since the selector then
//                   prices that link wrongly (a probe that shared its
//                   cores judges only a model slower than what it saw);
//   job_all_reduce  an all_reduce over every rank at 256 KiB – 16 MiB,
//                   the algorithm the selector picked and its time beside
//                   the model's.
// Rank 0 prints every host's report (received from each host's first
// rank) and the job's sections; every rank exits 1 when any failed.
// The communicator is made with BRAID_PROBE=0: the doctor reports the
// figures jobs use, it does not rewrite them.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "braid/comm.h"
#include "braid/env.h"
#include "braid/error.h"
#include "braid/tuning.h"
#include "doctor.h"
#include "link_probe.h"
#include "sizes.h"

namespace braid::tool::doctor {
namespace {

constexpr double kStale = 2.0;  // model vs probe, either way

comm::LinkCost model_link(const comm::CostParams& p, const std::string& kind) {
  return kind == "shm" ? p.shm : kind == "tcp" ? p.tcp : p.net;
}

Check check_links(Communicator& comm, const std::vector<ClassProbe>& probes) {
  Check c{"links"};
  comm::CostParams p;
  try {
    p = comm::parse_cost_params(comm::read_tuning(), comm::default_tuning_path());
  } catch (const Error&) {  // the tuning section reports it; compare with the built-in figures
  }
  std::string stale;
  for (const ClassProbe& l : probes) {
    const comm::LinkCost measured = comm::calibrate_link(l.kind, l.sample);
    const comm::LinkCost model = model_link(p, l.kind);
    const double gbps = 1.0 / measured.beta_s_per_b / 1e9, model_gbps = 1.0 / model.beta_s_per_b / 1e9;
    // How far off the model is. A probe that shared its cores can only
    // have made the link look slower, so then only a model slower than
    // what it saw counts.
    const bool loaded = l.sample.core_share < comm::kMinCoreShare;
    const double slower = std::max(model.alpha_s / measured.alpha_s, gbps / model_gbps);
    const double faster = std::max(measured.alpha_s / model.alpha_s, model_gbps / gbps);
    const double off = loaded ? slower : std::max(slower, faster);
    c.data[l.kind] = {{"peer", l.peer},
                      {"peer_host", comm.host_of(l.peer)},
                      {"probed", {{"alpha_us", l.sample.alpha_s * 1e6},
                                  {"gbps", l.sample.gbps},
                                  {"core_share", l.sample.core_share}}},
                      {"calibrated", {{"alpha_us", measured.alpha_s * 1e6}, {"gbps", gbps}}},
                      {"model", {{"alpha_us", model.alpha_s * 1e6}, {"gbps", model_gbps}}}};
    add_finding(c, Verdict::kOk,
                l.kind + " to rank " + std::to_string(l.peer) + " on " + comm.host_of(l.peer) +
                    ": " + fixed(l.sample.alpha_s * 1e6, 2) + " us, " + fixed(l.sample.gbps, 2) +
                    " GB/s (model " + fixed(model.alpha_s * 1e6, 1) + " us + " +
                    fixed(model_gbps, 1) + " GB/s, this probe gives " +
                    fixed(measured.alpha_s * 1e6, 1) + " us + " + fixed(gbps, 1) + ")");
    if (loaded)
      add_finding(c, Verdict::kNote,
                  "the " + l.kind + " probe shared its cores (share " +
                      fixed(l.sample.core_share, 2) + "): its figures describe that load");
    if (off > kStale)
      stale += (stale.empty() ? "" : ", ") + l.kind + " " + fixed(off, 1) + "×";
  }
  if (probes.empty()) add_finding(c, Verdict::kNote, "no link to probe");
  if (!stale.empty())
    add_finding(c, Verdict::kWarn,
                "the cost model's figures are off from these links (" + stale +
                    "), so it picks algorithms for other links",
                "braid bench --probe, run as a job across these hosts on idle machines, "
                "rewrites them");
  return c;
}

Check check_job_all_reduce(Communicator& comm, int hosts) {
  Check c{"job_all_reduce"};
  nlohmann::json rows = nlohmann::json::array();
  std::string summary, slow;
  std::vector<float> buf;
  for (size_t bytes = 256 << 10; bytes <= (16u << 20); bytes *= 4) {
    buf.assign(bytes / sizeof(float), 1.0f);
    for (int i = 0; i < 2; ++i) comm.all_reduce(buf.data(), buf.data(), buf.size(), DType::kF32, ReduceOp::kSum);
    std::vector<double> t;
    for (int i = 0; i < 5; ++i) {
      comm.barrier();
      const double t0 = now_s();
      comm.all_reduce(buf.data(), buf.data(), buf.size(), DType::kF32, ReduceOp::kSum);
      t.push_back(now_s() - t0);
    }
    std::sort(t.begin(), t.end());
    const std::string algo = comm.last_algorithm();
    double us = t[t.size() / 2] * 1e6;
    comm.all_reduce(&us, &us, 1, DType::kF64, ReduceOp::kMax);  // the slowest rank's
    const double pred = comm.predicted_seconds("all_reduce", algo, bytes) * 1e6;
    const double ratio = pred > 0 && std::isfinite(pred) ? us / pred : 0;
    rows.push_back({{"bytes", bytes}, {"algo", algo}, {"time_us", us}, {"model_us", pred},
                    {"ratio", ratio}, {"busbw_gbps", 2.0 * (comm.size() - 1) / comm.size() *
                                                         double(bytes) / (us * 1e-6) / 1e9}});
    summary += (summary.empty() ? "" : ", ") + format_size(double(bytes)) + " " + algo + " " +
               fixed(us, 0) + " us (model " + fixed(pred, 0) + ")";
    if (ratio > 2.0)
      slow += (slow.empty() ? "" : ", ") + format_size(double(bytes)) + " " + fixed(ratio, 1) + "×";
  }
  c.data["rows"] = rows;
  c.summary = std::to_string(comm.size()) + " ranks on " + std::to_string(hosts) + " host" +
              (hosts > 1 ? "s" : "") + ": " + summary;
  if (!slow.empty())
    add_finding(c, Verdict::kWarn,
                "slower than the cost model by more than 2× (" + slow +
                    "): other work shares the cores or links, or the model's figures are stale",
                "see the links section");
  return c;
}

// Text from every host's first rank to rank 0: its length, then its bytes.
std::vector<std::string> gather_at_zero(Communicator& comm, const std::vector<int>& leaders,
                                        const std::string& mine) {
  std::vector<std::string> out;
  const int r = comm.rank();
  for (int l : leaders) {
    if (l == 0) {
      if (r == 0) out.push_back(mine);
      continue;
    }
    if (r == l) {
      int64_t n = int64_t(mine.size());
      comm.send(&n, 1, DType::kI64, 0);
      comm.send(mine.data(), mine.size(), DType::kU8, 0);
    } else if (r == 0) {
      int64_t n = 0;
      comm.recv(&n, 1, DType::kI64, l);
      std::string s(size_t(n), '\0');
      comm.recv(s.data(), size_t(n), DType::kU8, l);
      out.push_back(std::move(s));
    }
  }
  return out;
}

}  // namespace

int doctor_job(const Options& opt, bool json) {
  ::setenv("BRAID_PROBE", "0", 1);
  std::shared_ptr<Communicator> comm = Communicator::from_env();
  const int r = comm->rank(), n = comm->size();
  // Each host's first rank, in rank order.
  std::vector<int> leaders;
  std::map<std::string, int> ranks_on;
  for (int p = 0; p < n; ++p)
    if (ranks_on[comm->host_of(p)]++ == 0) leaders.push_back(p);
  const bool leader = std::find(leaders.begin(), leaders.end(), r) != leaders.end();

  std::string mine;
  if (leader) {
    Options o = opt;
    o.ranks = comm->host_size();
    const std::vector<Check> checks = host_checks(o);
    nlohmann::json order = nlohmann::json::array();
    for (const Check& c : checks) order.push_back(c.section);
    mine = nlohmann::json{{"host", hostname()}, {"ranks", o.ranks}, {"order", order},
                          {"failures", count(checks, Verdict::kFail)},
                          {"warnings", count(checks, Verdict::kWarn)},
                          {"checks", checks_json(checks)}}
               .dump();
  }
  const std::vector<std::string> hosts = gather_at_zero(*comm, leaders, mine);
  std::vector<Check> job;
  const std::vector<ClassProbe> probes = probe_each_class(*comm);
  if (r == 0) job.push_back(check_links(*comm, probes));
  {
    Check ar = check_job_all_reduce(*comm, int(leaders.size()));
    if (r == 0) job.push_back(std::move(ar));
  }

  int fails = 0, warns = 0;
  if (r == 0) {
    fails = count(job, Verdict::kFail);
    warns = count(job, Verdict::kWarn);
    nlohmann::json out = {{"ranks", n}, {"hosts", nlohmann::json::array()}};
    for (const std::string& h : hosts) {
      const nlohmann::json j = nlohmann::json::parse(h);
      fails += j["failures"].get<int>();
      warns += j["warnings"].get<int>();
      out["hosts"].push_back(j);
    }
    out["checks"] = checks_json(job);
    out["failures"] = fails;
    out["warnings"] = warns;
    out["ok"] = fails == 0;
    if (json) {
      std::printf("%s\n", out.dump(2).c_str());
    } else {
      std::printf("braid doctor: a job of %d ranks on %zu host%s\n", n, hosts.size(),
                  hosts.size() > 1 ? "s" : "");
      for (const nlohmann::json& h : out["hosts"]) {
        std::printf("[%s, %d rank%s]\n", h["host"].get<std::string>().c_str(), h["ranks"].get<int>(),
                    h["ranks"].get<int>() > 1 ? "s" : "");
        for (const auto& name : h["order"]) {
          const std::string section = name.get<std::string>();
          const nlohmann::json& c = h["checks"][section];
          std::printf("%-5s %-11s %s\n", c["status"].get<std::string>().c_str(), section.c_str(),
                      c["summary"].get<std::string>().c_str());
          if (!c["fix"].get<std::string>().empty())
            std::printf("%-17s fix: %s\n", "", c["fix"].get<std::string>().c_str());
        }
      }
      std::printf("[the job's links]\n");
      print_checks(job);
      print_totals(fails, warns);
    }
    std::fflush(stdout);
  }
  comm->broadcast(&fails, 1, DType::kI32, 0);
  return fails ? 1 : 0;
}

}  // namespace braid::tool::doctor
