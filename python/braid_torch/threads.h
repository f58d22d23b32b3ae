// Compute threads of a rank's process when several ranks share its host.
//
// torchrun gives each worker OMP_NUM_THREADS=1 when that is unset. Ranks
// started any other way (by hand, by a script, by mpirun) keep torch's
// default of one intra-op thread per core each, and Debian's default BLAS
// (the pthreads OpenBLAS, which torch.set_num_threads does not govern)
// keeps its own pool of one thread per core: k ranks on c cores then run
// 2·k·c compute threads that spin against each other and against braid's
// communication thread.
//
// So the first braid process group of a process, when neither
// OMP_NUM_THREADS nor OPENBLAS_NUM_THREADS is set and more than one rank
// of the group runs on this host, lowers (never raises) torch's intra-op
// threads and those of an OpenBLAS loaded in the process to
// braid::cores_per_rank(ranks on this host): the count `braid run` gives its
// ranks. Setting either variable, to any count, leaves every thread
// setting as the process has it; torch.set_num_threads called after
// init_process_group overrides torch's part.
#pragma once

namespace braid_torch {

struct ThreadCap {
  bool applied = false;  // false: a variable was set, one rank on this host, or not the first group
  int threads = 0;       // the cap (when applied)
  int torch_before = 0;  // torch's intra-op threads before
  int blas_before = 0;   // the OpenBLAS pool before; 0 when no OpenBLAS is loaded
};

// Applies the rule above, once per process (later calls return a ThreadCap
// with applied == false and change nothing).
ThreadCap cap_compute_threads(int host_ranks);

}  // namespace braid_torch
