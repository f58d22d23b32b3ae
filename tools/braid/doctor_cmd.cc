// braid doctor: a preflight to run on a new machine or node before a job.
// Each section (doctor.h) says what it found and, where something is wrong,
// a one-line fix. Exit status 1 when a check fails — something that would
// make a job fail or run far below speed — else 0; warnings and notes do
// not change it.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "braid/env.h"
#include "braid/job.h"
#include "doctor.h"
#include "sizes.h"
#include "subcommands.h"

namespace braid::tool {

namespace doctor {

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::kOk: return "ok";
    case Verdict::kNote: return "note";
    case Verdict::kWarn: return "warn";
    case Verdict::kFail: return "FAIL";
  }
  return "?";
}

void add_finding(Check& c, Verdict v, const std::string& what, const std::string& fix) {
  if (v > c.verdict) c.verdict = v;
  if (!what.empty()) c.summary += (c.summary.empty() ? "" : "; ") + what;
  if (!fix.empty()) c.fix += (c.fix.empty() ? "" : "; ") + fix;
}

std::string fixed(double v, int digits) {
  char b[32];
  std::snprintf(b, sizeof b, "%.*f", digits, v);
  return b;
}

std::vector<Check> host_checks(const Options& o) {
  std::vector<Check> checks;
  for (auto check : {check_cores, check_shm, check_blas, check_openmp, check_thread_env,
                     check_ptrace, check_open_files, check_network, check_tuning})
    checks.push_back(check(o));
  return checks;
}

int count(const std::vector<Check>& checks, Verdict v) {
  int n = 0;
  for (const Check& c : checks) n += c.verdict == v;
  return n;
}

nlohmann::json checks_json(const std::vector<Check>& checks) {
  nlohmann::json out = nlohmann::json::object();
  for (const Check& c : checks)
    out[c.section] = {{"status", verdict_name(c.verdict)}, {"summary", c.summary},
                      {"fix", c.fix}, {"data", c.data}};
  return out;
}

void print_checks(const std::vector<Check>& checks) {
  for (const Check& c : checks) {
    std::printf("%-5s %-11s %s\n", verdict_name(c.verdict), c.section.c_str(), c.summary.c_str());
    if (!c.fix.empty()) std::printf("%-17s fix: %s\n", "", c.fix.c_str());
  }
}

void print_totals(int fails, int warns) {
  std::printf("%d failure%s, %d warning%s%s\n", fails, fails == 1 ? "" : "s", warns,
              warns == 1 ? "" : "s", fails ? ": a job here would fail or run far below speed" : "");
}

}  // namespace doctor

int doctor_main(int argc, char** argv) {
  using namespace doctor;
  CLI::App app{"braid doctor: check this machine before a job (exit 1: a job would fail or run "
               "far below speed)",
               "braid doctor"};
  Options o;
  o.ranks = std::max(2, usable_cores());
  bool json = false, no_all_reduce = false;
  std::string shm_size;
  app.add_option("-n,--ranks", o.ranks, "judge for a job of N ranks on this host (default: one per core, at least 2)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--shm-size", shm_size,
                 "judge /dev/shm as if it had this size, all free (e.g. 64M, Docker's default)");
  app.add_flag("--no-all-reduce", no_all_reduce, "skip the 2-rank all_reduce against the cost model");
  app.add_flag("--json", json, "one JSON object instead of text");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (!shm_size.empty()) o.shm_size = parse_size(shm_size, "--shm-size");
  o.all_reduce = !no_all_reduce;

  // Started by a launcher with other ranks: the job's hosts and links.
  if (launched_job().size > 1) return doctor_job(o, json);

  // The all_reduce last: it is the slow one, and it runs the transport
  // the sections above judge.
  std::vector<Check> checks = host_checks(o);
  checks.push_back(check_all_reduce(o));

  const int fails = count(checks, Verdict::kFail), warns = count(checks, Verdict::kWarn);
  if (json) {
    nlohmann::json out = {{"host", hostname()}, {"ranks", o.ranks}, {"failures", fails},
                          {"warnings", warns}, {"ok", fails == 0}};
    out["checks"] = checks_json(checks);
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf("braid doctor: %s, judged for a job of %d rank%s on this host\n", hostname().c_str(),
                o.ranks, o.ranks > 1 ? "s" : "");
    print_checks(checks);
    print_totals(fails, warns);
  }
  std::fflush(stdout);
  return fails ? 1 : 0;
}

}  // namespace braid::tool
