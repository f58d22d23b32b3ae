// Compute threads: how many a process uses, and the runtime they run on.
//
// Invariant: braid's own loops and the BLAS run on ONE threading runtime,
// OpenMP (libgomp). braid links the OpenMP build of OpenBLAS whatever the
// system's default BLAS is (cmake/braidOpenBLAS.cmake); its parallel
// regions use the same team of threads as braid's, and a GEMM issued
// inside one of braid's parallel loops runs single-threaded. With the
// pthread build, a process holds two pools of spinning workers that take
// the cores from each other (2 threads ran at less than half the speed of
// 1 on a 2-core machine). blas_info() and openmp_runtimes() let a test and
// `braid doctor` check the invariant in a running process.
#pragma once

#include <string>
#include <vector>

namespace braid {

// Sets the threads this process uses for compute: OpenBLAS
// (openblas_set_num_threads) and OpenMP (omp_set_num_threads) both. Several
// ranks sharing a host should each set ranks × threads ≤ cores. n ≥ 1;
// throws Error(kInvalidArgument) otherwise. With n > 1 and a BLAS that
// runs its own threads (not the OpenMP build) it logs one warning per
// process: that configuration runs far below speed.
void set_num_threads(int n);
int num_threads();

// How the BLAS loaded in this process runs its threads
// (openblas_get_parallel: 0, 1, 2).
enum class BlasThreading { kSerial, kPthreads, kOpenMP };
const char* blas_threading_name(BlasThreading t);  // "serial", "pthreads", "openmp"

struct BlasInfo {
  std::string library;  // the file that defines cblas_sgemm, symlinks resolved
  std::string core;     // kernel set OpenBLAS chose ("Haswell", ...); OPENBLAS_CORETYPE overrides
  std::string config;   // openblas_get_config(): version and build options
  BlasThreading threading = BlasThreading::kSerial;
  int threads = 1;      // openblas_get_num_threads()
};
// What the BLAS in this process is. Cheap (a dladdr and a few getters).
BlasInfo blas_info();

// The OpenMP runtimes loaded in this process (libgomp, libomp, libiomp5:
// their files, symlinks resolved), in load order. One, when the invariant
// above holds: two runtimes are two pools of threads.
std::vector<std::string> openmp_runtimes();

// The compute thread count for a process, and where it came from.
struct ThreadChoice {
  int threads = 1;
  // "--threads", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS" or "cores".
  std::string source;
  // One line for the user when a thread setting in the environment is
  // overridden (never silently), else "".
  std::string note;
};
// requested > 0 (a --threads flag) wins; else OMP_NUM_THREADS (its first
// entry), else OPENBLAS_NUM_THREADS, else cores_per_rank(ranks_sharing).
// One count serves OpenMP and the BLAS, which share one pool, so an
// environment value that differs from the choice is named in `note`.
// Throws Error(kInvalidArgument) naming the variable when a thread variable
// is set to something other than a positive integer.
ThreadChoice choose_threads(int requested, int ranks_sharing);

}  // namespace braid
