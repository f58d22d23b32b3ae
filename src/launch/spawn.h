// Starting one rank: a child process in its own process group, its stdout and
// stderr on pipes, its environment prepared before fork (the launcher may
// have threads, so nothing between fork and exec allocates).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace braid::launch {

struct Child {
  pid_t pid = -1;
  int out_fd = -1;  // read ends, non-blocking, close-on-exec
  int err_fd = -1;
};

// The executable that execvp would run for `program`, or "" if none.
std::string resolve_program(const std::string& program);

// This process's environment with `overrides` ("K=V") replacing or adding.
std::vector<std::string> merged_environment(const std::vector<std::string>& overrides);

// Forks and execs `path` with `argv` and `env`. The child gets its own
// process group (pgid == pid), stdin from /dev/null, default signal
// dispositions, and dies with SIGKILL if the launcher dies. Throws Error(kIo)
// if the pipes or the fork fail; an exec failure shows as exit status 127.
Child spawn(const std::string& path, const std::vector<std::string>& argv,
            const std::vector<std::string>& env);

// "exited with status 3" / "exited with status 139 (signal SIGSEGV)", and the
// status a shell would report (128 + signal number for a signal).
std::string describe_wait_status(int wstatus);
int shell_status(int wstatus);
std::string signal_name(int sig);

}  // namespace braid::launch
