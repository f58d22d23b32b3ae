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

// Where a group's collectives run: on braid's background thread (so that
// the caller computes while they move), or on the thread that issues them
// (braid::Communicator::set_async_inline: an async call returns a finished
// work). When this host's ranks' compute threads already take every core
// (host_ranks × torch's intra-op threads ≥ the cores this process may
// use, which the cap above makes so), the background thread has no core
// of its own: it takes turns with the computation it is meant to overlap,
// and adds a thread hand-off per operation. DDP on the Fashion-MNIST MLP, 2
// ranks × 1 thread on 2 cores, ran about 5% faster with its buckets
// reduced on the autograd thread (docs/PERFORMANCE.md, section 6).
// BRAID_TORCH_INLINE=1 / 0 decides instead. Read once per group, at its
// creation: torch.set_num_threads after init_process_group does not
// change it.
bool collectives_inline(int host_ranks);

}  // namespace braid_torch
