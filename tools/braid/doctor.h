// braid doctor's checks: one function per section of the report, each
// returning what it found, how bad it is and a one-line fix.
// doctor_cmd.cc runs them in order and prints text or JSON; the exit status
// is non-zero when any check is kFail (a job would fail or run far below
// speed). Sections: doctor_host.cc (cores, shm, ptrace, open_files,
// network), doctor_compute.cc (blas, openmp, thread_env), doctor_links.cc
// (tuning, all_reduce). Started as the ranks of a job (braid run --nnodes,
// srun, mpirun), doctor_job.cc runs the host sections once per host and
// measures the job's links (links, job_all_reduce) in place of the 2-rank
// all_reduce.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace braid::tool::doctor {

// kNote: worth knowing, nothing to fix. kWarn: slower or fragile, the job
// runs. kFail: a job would fail or run far below speed.
enum class Verdict { kOk, kNote, kWarn, kFail };
const char* verdict_name(Verdict v);  // "ok", "note", "warn", "FAIL"

struct Check {
  explicit Check(std::string name) : section(std::move(name)) {}
  std::string section;
  Verdict verdict = Verdict::kOk;
  std::string summary;  // one line: what was found
  std::string fix;      // one line when verdict >= kWarn, else ""
  nlohmann::json data = nlohmann::json::object();  // the figures, for --json
};

// Adds a finding to `c`: the verdict is the worst seen, the summary and the
// fix gain `what` and `fix` (after "; ").
void add_finding(Check& c, Verdict v, const std::string& what, const std::string& fix = "");

struct Options {
  int ranks = 2;                   // judge for a job of this many ranks on this host
  std::optional<size_t> shm_size;  // treat /dev/shm as this size, all free (--shm-size)
  bool all_reduce = true;          // run the 2-rank all_reduce (--no-all-reduce skips it)
};

Check check_cores(const Options& o);
Check check_shm(const Options& o);
Check check_ptrace(const Options& o);
Check check_open_files(const Options& o);
Check check_network(const Options& o);

Check check_blas(const Options& o);
Check check_openmp(const Options& o);
Check check_thread_env(const Options& o);

Check check_tuning(const Options& o);
Check check_all_reduce(const Options& o);

// `v` with `digits` decimals, for a report line.
std::string fixed(double v, int digits);

// Every section above but the all_reduce, in report order.
std::vector<Check> host_checks(const Options& o);
int count(const std::vector<Check>& checks, Verdict v);
nlohmann::json checks_json(const std::vector<Check>& checks);  // section → status, summary, fix, data
void print_checks(const std::vector<Check>& checks);
void print_totals(int fails, int warns);

// braid doctor as one rank of a launched job of 2+ ranks (doctor_job.cc):
// collective. Rank 0 prints every host's report and the links; every rank
// returns the exit status (1 when any host or the links failed).
int doctor_job(const Options& o, bool json);

}  // namespace braid::tool::doctor
