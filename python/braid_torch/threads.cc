#include "threads.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>

#include <ATen/Parallel.h>

#include "braid/env.h"
#include "braid/error.h"
#include "braid/log.h"

namespace braid_torch {
namespace {

// The OpenBLAS torch loaded (through libblas.so.3), found by its soname
// without loading one: RTLD_NOLOAD returns only a library already mapped,
// whichever directory (pthreads or OpenMP build) it came from.
struct OpenBlas {
  int (*get)() = nullptr;
  void (*set)(int) = nullptr;
};

OpenBlas loaded_openblas() {
  OpenBlas b;
  void* h = ::dlopen("libopenblas.so.0", RTLD_LAZY | RTLD_NOLOAD);
  if (!h) return b;
  b.get = reinterpret_cast<int (*)()>(::dlsym(h, "openblas_get_num_threads"));
  b.set = reinterpret_cast<void (*)(int)>(::dlsym(h, "openblas_set_num_threads"));
  ::dlclose(h);  // drops only the reference NOLOAD took; torch keeps its own
  if (!b.get || !b.set) return {};
  return b;
}

}  // namespace

ThreadCap cap_compute_threads(int host_ranks) {
  static std::atomic<bool> done{false};
  ThreadCap c;
  if (done.exchange(true)) return c;
  if (host_ranks <= 1 || braid::env_str("OMP_NUM_THREADS") || braid::env_str("OPENBLAS_NUM_THREADS"))
    return c;
  c.applied = true;
  c.threads = braid::cores_per_rank(host_ranks);
  c.torch_before = at::get_num_threads();
  if (c.torch_before > c.threads) at::set_num_threads(c.threads);
  const OpenBlas blas = loaded_openblas();
  if (blas.get) {
    c.blas_before = blas.get();
    if (c.blas_before > c.threads) blas.set(c.threads);
  }
  BRAID_LOG(kInfo, "braid_torch: " << host_ranks << " ranks on this host, neither OMP_NUM_THREADS nor "
                                   << "OPENBLAS_NUM_THREADS set: compute threads at most " << c.threads
                                   << " (torch had " << c.torch_before << ", OpenBLAS "
                                   << c.blas_before << ")");
  return c;
}

bool collectives_inline(int host_ranks) {
  if (auto v = braid::env_str("BRAID_TORCH_INLINE")) {
    if (*v == "1") return true;
    if (*v == "0") return false;
    throw braid::Error(braid::Errc::kInvalidArgument,
                       "BRAID_TORCH_INLINE is '" + *v + "': 1 (collectives on the issuing thread) or 0 "
                       "(on braid's background thread)");
  }
  return int64_t(std::max(host_ranks, 1)) * at::get_num_threads() >= braid::usable_cores();
}

}  // namespace braid_torch
