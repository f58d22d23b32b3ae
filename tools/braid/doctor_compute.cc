// braid doctor, compute: the BLAS this process loaded and how it runs its
// threads, the OpenMP runtime, and the thread settings in the environment
// that pin or fight (braid/threads.h states the invariant checked here).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "braid/env.h"
#include "braid/error.h"
#include "braid/threads.h"
#include "doctor.h"

extern char** environ;

namespace braid::tool::doctor {

namespace {

// The threads a rank of a job of o.ranks would use, or 0 when the
// environment's setting is malformed (check_thread_env reports that).
int job_threads(const Options& o) {
  try {
    return choose_threads(0, o.ranks).threads;
  } catch (const Error&) {
    return 0;
  }
}

}  // namespace

Check check_blas(const Options& o) {
  Check c{"blas"};
  const BlasInfo b = blas_info();
  c.data = {{"library", b.library}, {"kernels", b.core}, {"config", b.config},
            {"threading", blas_threading_name(b.threading)}, {"threads", b.threads}};
  c.summary = b.library + ": kernels " + b.core + ", " + blas_threading_name(b.threading) +
              " threading";
  const std::string fix =
      env_str("LD_LIBRARY_PATH")
          ? "unset LD_LIBRARY_PATH (it put this BLAS first), or point it at the OpenMP build"
          : "rebuild braid with the OpenMP build of OpenBLAS (apt-get install "
            "libopenblas-openmp-dev; scripts/deps.sh)";
  if (b.threading == BlasThreading::kPthreads)
    // A failure wherever a process gets more than one thread by default
    // (one process on a host of several cores does).
    add_finding(c, std::max(job_threads(o), cores_per_rank(1)) > 1 ? Verdict::kFail : Verdict::kWarn,
                "the BLAS runs its own threads beside braid's OpenMP threads: with more than one "
                "thread per process they take the cores from each other (far below speed)",
                fix);
  else if (b.threading == BlasThreading::kSerial)
    add_finding(c, Verdict::kWarn, "the BLAS is single-threaded: GEMMs use one core per rank", fix);
  return c;
}

Check check_openmp(const Options& o) {
  Check c{"openmp"};
  const std::vector<std::string> rts = openmp_runtimes();
  std::string joined;
  for (auto& r : rts) joined += (joined.empty() ? "" : ", ") + r;
  c.data = {{"runtimes", rts}, {"max_threads", num_threads()}, {"job_threads", job_threads(o)}};
  c.summary = (rts.empty() ? std::string("no OpenMP runtime loaded") : joined) + "; each of " +
              std::to_string(o.ranks) + " ranks would run " + std::to_string(job_threads(o)) +
              " thread" + (job_threads(o) == 1 ? "" : "s");
  if (rts.empty())
    add_finding(c, Verdict::kFail, "braid's loops would run on one thread",
                "rebuild braid with OpenMP (CMake's find_package(OpenMP))");
  else if (rts.size() > 1)
    add_finding(c, Verdict::kFail,
                "more than one OpenMP runtime: two pools of threads compete for the cores",
                "link one runtime (libgomp) for braid and the BLAS alike");
  return c;
}

Check check_thread_env(const Options& o) {
  Check c{"thread_env"};
  nlohmann::json vars = nlohmann::json::object();
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    for (const char* p : {"OMP_", "GOMP_", "OPENBLAS_", "GOTO_", "KMP_", "MKL_"})
      if (kv.rfind(p, 0) == 0) {
        const size_t eq = kv.find('=');
        vars[kv.substr(0, eq)] = eq == std::string::npos ? "" : kv.substr(eq + 1);
      }
  }
  c.data["set"] = vars;
  c.summary = vars.empty() ? "no OMP_*, GOMP_*, OPENBLAS_* settings"
                           : std::to_string(vars.size()) + " setting(s): " + [&] {
                               std::string s;
                               for (auto& [k, v] : vars.items())
                                 s += (s.empty() ? "" : " ") + k + "=" + v.get<std::string>();
                               return s;
                             }();
  ThreadChoice tc;
  try {
    tc = choose_threads(0, o.ranks);
  } catch (const Error& e) {
    add_finding(c, Verdict::kFail, e.what(), "set it to a positive integer, or unset it");
    return c;
  }
  c.data["job_threads"] = tc.threads;
  c.data["job_threads_from"] = tc.source;
  const int cores = usable_cores();
  if (tc.source != "cores" && tc.threads * o.ranks > cores)
    add_finding(c, Verdict::kWarn,
                tc.source + "=" + std::to_string(tc.threads) + " × " + std::to_string(o.ranks) +
                    " ranks is more threads than the " + std::to_string(cores) +
                    " cores: spinning threads wait on each other",
                "unset " + tc.source + " (braid uses cores / ranks on the host)");
  if (!tc.note.empty())
    add_finding(c, Verdict::kNote,
                "OMP_NUM_THREADS and OPENBLAS_NUM_THREADS differ; braid uses one count for both (" +
                    tc.source + ")");
  for (const char* pin : {"OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY", "KMP_AFFINITY"})
    if (vars.contains(pin) && o.ranks > 1)
      add_finding(c, Verdict::kWarn,
                  std::string(pin) + " binds threads to places counted from each process's "
                  "first core, so the ranks of a host pile onto the same cores",
                  std::string("unset ") + pin + " (or give each rank its own cores with taskset)");
  if (vars.contains("OMP_WAIT_POLICY"))
    add_finding(c, Verdict::kNote,
                "OMP_WAIT_POLICY=" + vars["OMP_WAIT_POLICY"].get<std::string>() +
                    " changes how braid's idle threads wait (braid needs none: one pool)");
  if (vars.contains("OPENBLAS_CORETYPE"))
    add_finding(c, Verdict::kNote,
                "OPENBLAS_CORETYPE=" + vars["OPENBLAS_CORETYPE"].get<std::string>() +
                    " pins OpenBLAS's kernel set instead of its choice for this CPU");
  return c;
}

}  // namespace braid::tool::doctor
