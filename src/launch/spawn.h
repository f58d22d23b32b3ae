// Starting one rank: a child process in its own process group, its stdout and
// stderr on pipes (or the launcher's own), its environment prepared before
// fork (the launcher may have threads, so nothing between fork and exec
// allocates).
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

namespace braid::launch {

struct Child {
  pid_t pid = -1;
  int out_fd = -1;  // read ends, non-blocking, close-on-exec; -1 without pipes
  int err_fd = -1;
};

// The executable that execvp would run for `program`, or "" if none.
std::string resolve_program(const std::string& program);

// This process's environment with `overrides` ("K=V") replacing or adding.
std::vector<std::string> merged_environment(const std::vector<std::string>& overrides);

// Forks a child that gets its own process group (pgid == pid), stdin from
// /dev/null, the default disposition of the signals a launcher handles
// (INT, TERM, HUP, CHLD, PIPE, QUIT), an empty signal mask, dies
// with SIGKILL if the launcher dies, and has `close_fds` closed. With
// `pipes`, its stdout and stderr go to new pipes whose read ends are
// returned; without, it keeps the launcher's. The child then runs
// `in_child`, which must not return (it execs or _exits); if it does, the
// child exits 127. Signals are blocked in the launcher across the fork, so a
// signal meant for the launcher never runs its handler in the child.
// Throws Error(kIo) if the pipes or the fork fail.
Child fork_child(bool pipes, const std::vector<int>& close_fds,
                 const std::function<void()>& in_child);

// fork_child with pipes that execs `path` with `argv` and `env`; an exec
// failure shows as exit status 127 with the reason on the child's stderr.
Child spawn(const std::string& path, const std::vector<std::string>& argv,
            const std::vector<std::string>& env);

// How a child ended, for messages: "exited with status 3" / "was killed by
// signal 9 (SIGKILL)"; and the status a shell would report (128 + signal
// number for a signal).
std::string describe_wait_status(int wstatus);
int shell_status(int wstatus);
std::string signal_name(int sig);

}  // namespace braid::launch
