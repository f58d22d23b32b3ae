// braid doctor, links: the tuning file the cost model reads, and a 2-rank
// all_reduce at a few sizes beside the model's prediction for the
// algorithm that ran. The all_reduce is `braid bench` run as a child (the
// same code a user's benchmark runs), with BRAID_PROBE=0 so that the doctor
// writes no cache of its own.
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <sstream>

#include "braid/env.h"
#include "braid/error.h"
#include "braid/launch.h"
#include "braid/tuning.h"
#include "doctor.h"
#include "sizes.h"

namespace braid::tool::doctor {

namespace {

// Sizes from 256 KiB: the model has no term for a call's fixed software
// cost (a few µs, the same whichever algorithm runs, so it does not change
// a choice), which dominates small messages. A measurement this many times
// slower than the prediction is a warning (the link runs far below what the
// model assumes); this many times faster, a note (buffers that stay in
// cache move faster than the model's one β).
// (Wrong results need no check here: braid bench exits non-zero on them.)
constexpr double kOffBy = 2.0;

// "'a'\''b'" — one shell word.
std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char ch : s) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

struct Child {
  int status = -1;
  std::string out;
};

Child run_child(const std::string& cmd) {
  Child c;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) throw_errno("braid doctor: popen");
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) c.out.append(buf, n);
  const int st = ::pclose(p);
  c.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  return c;
}

// The first line that is not a result row: the first rank's error.
std::string first_message(const std::string& s) {
  std::string line;
  std::istringstream is(s);
  while (std::getline(is, line))
    if (!line.empty() && line[0] != '{') return line;
  return "(no message)";
}

}  // namespace

Check check_tuning(const Options&) {
  Check c{"tuning"};
  const bool chosen = env_str("BRAID_TUNING").has_value();
  const std::string path = comm::default_tuning_path();
  const std::string how = "braid bench -n 2 --probe (on an idle machine) rewrites " +
                          (path.empty() ? std::string("the cache") : path);
  std::string text;
  comm::CostParams p;
  try {
    text = comm::read_tuning();
    p = comm::parse_cost_params(text, path);
  } catch (const Error& e) {
    add_finding(c, Verdict::kFail, std::string("every job would fail: ") + e.what(),
                chosen ? "point BRAID_TUNING at a readable tuning file, or unset it" : "remove it; " + how);
    return c;
  }
  const auto link = [](const comm::LinkCost& l) {
    return nlohmann::json{{"alpha_us", l.alpha_s * 1e6}, {"gbps", 1.0 / l.beta_s_per_b / 1e9}};
  };
  c.data = {{"path", path}, {"from", chosen ? "BRAID_TUNING" : text.empty() ? "built-in" : "cache"},
            {"shm", link(p.shm)}, {"tcp", link(p.tcp)},
            {"reduce_gbps", 1.0 / p.gamma_s_per_b / 1e9}};
  if (!text.empty()) {
    try {
      const nlohmann::json j = nlohmann::json::parse(text);
      if (j.contains("probed")) c.data["probed"] = j["probed"];
    } catch (const nlohmann::json::exception&) {
    }
  }
  const std::string figures = "shm " + fixed(p.shm.alpha_s * 1e6, 2) + " us + " +
                              fixed(1.0 / p.shm.beta_s_per_b / 1e9, 1) + " GB/s, tcp " +
                              fixed(p.tcp.alpha_s * 1e6, 1) + " us + " +
                              fixed(1.0 / p.tcp.beta_s_per_b / 1e9, 1) + " GB/s, reduce " +
                              fixed(1.0 / p.gamma_s_per_b / 1e9, 1) + " GB/s";
  if (chosen)
    c.summary = "BRAID_TUNING=" + path + " (used as it is, never probed): " + figures;
  else if (!text.empty())
    c.summary = "cache " + path + ": " + figures;
  else
    c.summary = "no cache yet (" + (path.empty() ? std::string("no HOME") : path) +
                "): built-in figures " + figures +
                (env_str("BRAID_PROBE").value_or("1") == "0"
                     ? "; BRAID_PROBE=0, so jobs keep them"
                     : "; the first job of 2+ ranks probes its links and writes the cache");
  if (path.empty() && !chosen)
    add_finding(c, Verdict::kNote, "without HOME or XDG_CACHE_HOME every job probes again");
  return c;
}

Check check_all_reduce(const Options& o) {
  Check c{"all_reduce"};
  if (!o.all_reduce) {
    add_finding(c, Verdict::kNote, "skipped (--no-all-reduce)");
    return c;
  }
  const Child r = run_child("BRAID_PROBE=0 BRAID_TIMEOUT=60 " + shell_quote(self_exe()) +
                            " bench -n 2 --op all_reduce -b 256K -e 16M -f 4 --iters 20 "
                            "--warmup 3 --json");
  if (r.status != 0) {
    add_finding(c, Verdict::kFail,
                "a 2-rank all_reduce failed (exit " + std::to_string(r.status) + "): " +
                    first_message(r.out),
                "fix what the lines above name (shm, open files), then run braid bench -n 2");
    c.data["output"] = r.out;
    return c;
  }
  comm::CostParams p;
  try {
    p = comm::parse_cost_params(comm::read_tuning(), comm::default_tuning_path());
  } catch (const Error&) {  // check_tuning reports it; compare with the built-in figures
  }
  // The communicator `braid bench -n 2` makes: one host, both ranks on shm.
  nlohmann::json rows = nlohmann::json::array();
  std::string line, summary, slow, fast;
  std::istringstream is(r.out);
  while (std::getline(is, line)) {
    if (line.empty() || line[0] != '{') continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("time_us")) continue;
    const size_t bytes = j["bytes"].get<size_t>();
    const std::string algo = j["algo"].get<std::string>();
    const double us = j["time_us"].get<double>();
    const double pred = comm::predict_one_host(p, "all_reduce", algo, bytes, 2, usable_cores()) * 1e6;
    const double ratio = pred > 0 && std::isfinite(pred) ? us / pred : 0;
    rows.push_back({{"bytes", bytes}, {"algo", algo}, {"time_us", us}, {"model_us", pred},
                    {"ratio", ratio}});
    summary += (summary.empty() ? "" : ", ") + format_size(double(bytes)) + " " + algo + " " +
               fixed(us, 1) + " us (model " + fixed(pred, 1) + ")";
    if (ratio > kOffBy)
      slow += (slow.empty() ? "" : ", ") + format_size(double(bytes)) + " " + fixed(ratio, 1) + "×";
    else if (ratio > 0 && ratio < 1 / kOffBy)
      fast += (fast.empty() ? "" : ", ") + format_size(double(bytes)) + " " + fixed(1 / ratio, 1) + "×";
  }
  c.data["rows"] = rows;
  c.summary = "2 ranks on shm: " + summary;
  if (rows.empty())
    add_finding(c, Verdict::kFail, "braid bench printed no results: " + first_message(r.out),
                "run braid bench -n 2 and read its errors");
  if (!slow.empty())
    add_finding(c, Verdict::kWarn,
                "slower than the cost model by more than 2× (" + slow +
                    "): other work shares the cores, or the model's link figures are stale",
                "braid bench -n 2 --probe on an idle machine re-measures the links");
  if (!fast.empty())
    add_finding(c, Verdict::kNote, "faster than the cost model by more than 2× (" + fast + ")");
  return c;
}

}  // namespace braid::tool::doctor
