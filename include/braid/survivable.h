// Ranks whose death does not end the job.
//
// By default a supervisor stops the whole job when any rank fails. A rank
// whose work the job can finish without — a parameter server whose every
// shard is also kept by other servers (ps.h, chain replication) — says so
// in the job's store before it does anything the others rely on. When such
// a rank exits non-zero or is killed, the supervisor writes one line naming
// it and the reason it gave, and the job goes on; the job's status is that
// of the other ranks. Whether the rest of the job can really go on is
// theirs to find out: a worker whose chain lost every member fails, and
// that failure stops the job as any other.
//
// The mark lives under "launch/survivable/<global rank>"; the launchers
// (launch_local for braid run, run_forked) read it only when a rank fails.
//
// Other launchers. mpirun and srun do not read the marks: their own policy
// decides whether one rank's death ends the job. Open MPI 4's mpirun ends
// it unless started with --enable-recovery (which its ranks see as
// OMPI_MCA_orte_enable_recovery). Open MPI 5's mpirun (PRRTE, whose ranks
// see PRTE_LAUNCHED) ends it unless the job is recoverable: --with-ft ulfm
// makes it so and its ranks see OMPI_MCA_mpi_ft_enable; its
// --enable-recovery does too, but leaves nothing in the ranks'
// environment. srun keeps the others running unless
// --kill-on-bad-exit (or the site's KillOnBadExit) or --wait says
// otherwise, which its tasks cannot see. A launcher that lets ranks die
// also lets ranks that wait on a failed one wait on: such ranks end
// themselves through the failure a rank posts (post_failure).
#pragma once

#include <optional>
#include <string>

#include "braid/store.h"

namespace braid::launch {

// Records that rank `rank`'s death is survivable, because of `why` (shown
// in the supervisor's line; non-empty).
void mark_survivable(Store& store, int rank, const std::string& why);
// The reason rank `rank` gave, or nothing when it did not mark itself.
std::optional<std::string> survivable_reason(Store& store, int rank);

// When this process's environment shows a launcher that ends the whole job
// as soon as one rank dies whatever the marks say (Open MPI 4's mpirun
// without orte_enable_recovery, Open MPI 5's without mpi_ft_enable), the
// launcher's option that lets the others run on, as a user would add it
// ("mpirun --enable-recovery", "mpirun --with-ft ulfm"); empty under
// braid run, the self-forked job, srun, or no launcher.
std::string launcher_recovery_option();

// A rank that failed, under a launcher that may let the others run on,
// says so: "rank R: what" under "launch/failed" (the first one posted is
// kept). Never throws: a store that cannot take the post leaves the rank's
// own error to speak.
void post_failure(Store& store, int rank, const std::string& what);
// The failure some rank posted, if any.
std::optional<std::string> posted_failure(Store& store);

}  // namespace braid::launch
