// Launching a job: N local ranks of a program, supervised.
//
// launch_local() is what `braid run` does. The ranks are started and
// supervised by launch::Supervisor (supervisor.h), which also
// runs the forked ranks of `braid bench -n N` and `braid train --dp N`, so
// all three stop a failed job by the same rule and with the same message.
//
// What it does, in order:
//  1. The job secret: LaunchOptions::secret, else $BRAID_SECRET, else (one
//     node only) a fresh random one. Multi-node jobs must export the same
//     BRAID_SECRET on every node; launch_local refuses to guess.
//  2. The store: node 0 hosts a TcpStoreServer (on --master's port for
//     multi-node, on a free 127.0.0.1 port otherwise). Every launcher of a
//     multi-node job connects to it, checks that every node runs the same
//     number of ranks and that no node rank is taken twice.
//  3. Starts the ranks, each in its own process group with stdin from
//     /dev/null and this environment (global rank g = node_rank * n + i):
//       BRAID_RANK=g BRAID_WORLD_SIZE=nnodes*n BRAID_LOCAL_RANK=i
//       BRAID_LOCAL_WORLD_SIZE=n BRAID_NODE_RANK BRAID_NNODES
//       BRAID_STORE=host:port BRAID_SECRET
//       RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK (torch style)
//       BRAID_TIMEOUT (when LaunchOptions::timeout is set)
//       OMP_NUM_THREADS=cores_per_rank(n) (the launcher's CPU affinity / n) unless
//       already set
//  4. Copies each rank's stdout and stderr line by line, prefixed "[g] ", to
//     its own stdout/stderr; a line is written whole, never interleaved.
//     rank0_only drops the stdout of ranks other than 0 (stderr stays).
//  5. Forwards SIGINT, SIGTERM and SIGHUP to every rank's process group. When
//     a rank exits non-zero or by a signal (or, multi-node, a rank on another
//     node does), the others get SIGTERM, then SIGKILL after `grace`, and one
//     line goes to stderr:
//       braid run: rank K (pid P on host H) exited with status S; stopped
//       the other N-1 ranks
//     or, for a rank killed by a signal, "... was killed by signal 9
//     (SIGKILL); ...".
//     A rank that marked its death survivable in the job's store
//     (braid/survivable.h: a replicated parameter server) is named in
//     one line ending "; the job goes on (<its reason>)" and the others
//     run on.
//
//  6. With max_restarts, a failed job is started again (LaunchOptions), one
//     line to stderr per restart:
//       braid run: restarting the job (restart 1 of 2); its ranks see
//       BRAID_RESTART_COUNT=1
//
// Returns the job's status: 0 when every rank exited 0; else the failed
// rank's exit status (128 + signal number for a signal); 128 + signal when
// the launcher itself was interrupted; 124 when max_time passed; 127 when
// the program cannot be found. Throws Error(kInvalidArgument) for bad
// options, Error(kTimeout) when other nodes do not show up within `timeout`.
//
// One launch_local() (or other Supervisor) at a time per process: it
// installs its own handlers for SIGINT, SIGTERM, SIGHUP, SIGCHLD and SIGPIPE
// and restores them on return; a second one throws Error(kInvalidArgument).
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace braid {

struct LaunchOptions {
  int nnodes = 1;
  int node_rank = 0;
  // "host:port" of node 0's store. Required when nnodes > 1; optional
  // otherwise (then it fixes the port).
  std::string master;
  bool rank0_only = false;
  // Deadline for blocking operations in the ranks (exported as BRAID_TIMEOUT)
  // and for meeting the other nodes. 0: BRAID_TIMEOUT or 300 s, not exported.
  std::chrono::milliseconds timeout{0};
  // Wall-clock limit for the whole job; 0: none.
  std::chrono::milliseconds max_time{0};
  // SIGTERM -> SIGKILL delay when stopping ranks.
  std::chrono::milliseconds grace{std::chrono::seconds(3)};
  std::string secret;                  // "" : $BRAID_SECRET or a fresh one
  std::vector<std::string> extra_env;  // "K=V", set in every rank
  std::string tool_name = "braid run"; // how the launcher names itself in messages
  // Restarts of the whole job (torchrun's --max-restarts) when a rank
  // fails: every rank is stopped and all are started again with a fresh
  // store and BRAID_RESTART_COUNT (and TORCHELASTIC_RESTART_COUNT) = the
  // restart's number, so a program resumes from its newest checkpoint
  // (`braid train --checkpoint` does). Not after the launcher is
  // interrupted or max_time passes. Multi-node, every node's launcher
  // needs the same value: a rank failing on any node stops the ranks of
  // all, and all of them start again together (they agree through the
  // job's store, src/launch/node_link.h); a node that lost the store (its
  // link cut) does not restart, and the others then fail at the
  // rendezvous within `timeout`, naming it.
  int max_restarts = 0;
};

// Starts n ranks of argv (argv[0] is looked up in PATH unless it has a '/')
// and supervises them as described above.
int launch_local(int n, const std::vector<std::string>& argv, const LaunchOptions& opt = {});

// True in a process started as a rank by launch_local / braid run.
bool launched_as_rank();

// The absolute path of the running executable (/proc/self/exe).
std::string self_exe();

}  // namespace braid
