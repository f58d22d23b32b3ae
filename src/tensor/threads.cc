#include "braid/threads.h"

#include <cblas.h>
#include <dlfcn.h>
#include <link.h>
#include <omp.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <string_view>

#include "braid/env.h"
#include "braid/error.h"
#include "braid/log.h"

namespace braid {

namespace {

std::string resolved(const char* path) {
  if (path == nullptr || *path == 0) return "";
  std::error_code ec;
  auto p = std::filesystem::canonical(path, ec);
  return ec ? std::string(path) : p.string();
}

// The file a symbol of this process comes from ("" when it is linked in
// statically into the main program, whose dli_fname is the program).
std::string file_of(const void* symbol) {
  Dl_info info{};
  if (::dladdr(symbol, &info) == 0) return "";
  return resolved(info.dli_fname);
}

// A thread count from a variable, or 0 when unset. OMP_NUM_THREADS may be a
// list (one entry per nesting level); the outermost level is the first.
int threads_from_env(const char* name) {
  auto v = env_str(name);
  if (!v) return 0;
  const std::string first = v->substr(0, v->find(','));
  size_t pos = 0;
  long n = 0;
  try {
    n = std::stol(first, &pos, 10);
  } catch (const std::exception&) {
    pos = 0;
  }
  if (pos == 0 || pos != first.size() || n < 1 || n > 4096)
    throw Error(Errc::kInvalidArgument, std::string("environment variable ") + name + "='" + *v +
                                            "' is not a positive thread count");
  return int(n);
}

}  // namespace

void set_num_threads(int n) {
  BRAID_CHECK_ARG(n >= 1, "thread count must be >= 1, got " + std::to_string(n));
  // OpenMP build: this also sets omp_set_num_threads(n), the same count.
  openblas_set_num_threads(n);
  omp_set_num_threads(n);
  static std::atomic<bool> warned{false};
  if (n > 1 && openblas_get_parallel() != 2 && !warned.exchange(true))
    BRAID_LOG(kWarn, "the BLAS in this process (" << blas_info().library << ") runs "
                     << blas_threading_name(blas_info().threading)
                     << " threads beside OpenMP's: the two pools compete for the cores and "
                        "compute runs far below speed; use the OpenMP build of OpenBLAS "
                        "(`braid doctor` says which is loaded)");
}

int num_threads() { return omp_get_max_threads(); }

const char* blas_threading_name(BlasThreading t) {
  switch (t) {
    case BlasThreading::kSerial: return "serial";
    case BlasThreading::kPthreads: return "pthreads";
    case BlasThreading::kOpenMP: return "openmp";
  }
  return "?";
}

BlasInfo blas_info() {
  BlasInfo b;
  b.library = file_of(reinterpret_cast<const void*>(&cblas_sgemm));
  const char* core = openblas_get_corename();
  b.core = core != nullptr ? core : "";
  const char* cfg = openblas_get_config();
  b.config = cfg != nullptr ? cfg : "";
  switch (openblas_get_parallel()) {
    case 1: b.threading = BlasThreading::kPthreads; break;
    case 2: b.threading = BlasThreading::kOpenMP; break;
    default: b.threading = BlasThreading::kSerial; break;
  }
  b.threads = openblas_get_num_threads();
  return b;
}

std::vector<std::string> openmp_runtimes() {
  std::vector<std::string> found;
  ::dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) -> int {
        const std::string_view path = info->dlpi_name != nullptr ? info->dlpi_name : "";
        const std::string_view base = path.substr(path.rfind('/') + 1);
        for (std::string_view rt : {"libgomp.so", "libomp.so", "libiomp5.so"})
          if (base.rfind(rt, 0) == 0) {
            static_cast<std::vector<std::string>*>(out)->push_back(resolved(info->dlpi_name));
            break;
          }
        return 0;
      },
      &found);
  return found;
}

ThreadChoice choose_threads(int requested, int ranks_sharing) {
  const int omp = threads_from_env("OMP_NUM_THREADS");
  const int blas = threads_from_env("OPENBLAS_NUM_THREADS");
  ThreadChoice c;
  if (requested > 0) {
    c.threads = requested;
    c.source = "--threads";
  } else if (omp > 0) {
    c.threads = omp;
    c.source = "OMP_NUM_THREADS";
  } else if (blas > 0) {
    c.threads = blas;
    c.source = "OPENBLAS_NUM_THREADS";
  } else {
    c.threads = cores_per_rank(ranks_sharing);
    c.source = "cores";
  }
  std::string over;
  for (auto [name, v] : {std::pair{"OMP_NUM_THREADS", omp}, std::pair{"OPENBLAS_NUM_THREADS", blas}})
    if (v > 0 && v != c.threads)
      over += std::string(over.empty() ? "" : " and ") + name + "=" + std::to_string(v);
  if (!over.empty())
    c.note = "braid: " + std::to_string(c.threads) + " compute thread" +
             (c.threads > 1 ? "s" : "") + " (from " + c.source + ") for OpenMP and the BLAS, "
             "which share one pool; " + over + " overridden";
  return c;
}

}  // namespace braid
