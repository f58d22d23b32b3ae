#include "launch/spawn.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <map>

#include "braid/env.h"
#include "braid/error.h"

extern char** environ;

namespace braid::launch {

std::string resolve_program(const std::string& program) {
  auto runnable = [](const std::string& p) {
    struct stat st;
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
  };
  if (program.empty()) return "";
  if (program.find('/') != std::string::npos) return runnable(program) ? program : "";
  std::string path = env_str("PATH").value_or("/usr/local/bin:/usr/bin:/bin");
  size_t start = 0;
  for (;;) {
    size_t end = path.find(':', start);
    std::string dir = path.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (dir.empty()) dir.assign(1, '.');
    std::string cand = dir + "/" + program;
    if (runnable(cand)) return cand;
    if (end == std::string::npos) return "";
    start = end + 1;
  }
}

std::vector<std::string> merged_environment(const std::vector<std::string>& overrides) {
  std::map<std::string, std::string> kv;
  std::vector<std::string> order;
  auto put = [&](const std::string& e) {
    size_t eq = e.find('=');
    if (eq == std::string::npos || eq == 0) return;
    std::string k = e.substr(0, eq);
    if (!kv.count(k)) order.push_back(k);
    kv[k] = e.substr(eq + 1);
  };
  for (char** e = environ; e && *e; ++e) put(*e);
  for (auto& e : overrides) put(e);
  std::vector<std::string> out;
  out.reserve(order.size());
  for (auto& k : order) out.push_back(k + "=" + kv[k]);
  return out;
}

Child fork_child(bool pipes, const std::vector<int>& close_fds,
                 const std::function<void()>& in_child) {
  int out[2] = {-1, -1}, err[2] = {-1, -1};
  auto close_all = [&] {
    for (int fd : {out[0], out[1], err[0], err[1]})
      if (fd >= 0) ::close(fd);
  };
  if (pipes && (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)) {
    int e = errno;
    close_all();
    errno = e;
    throw_errno("launch: pipe");
  }
  int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  pid_t parent = ::getpid();
  sigset_t all, before;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &before);
  pid_t pid = ::fork();
  if (pid < 0) {
    int e = errno;
    ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
    close_all();
    if (devnull >= 0) ::close(devnull);
    errno = e;
    throw_errno("launch: fork");
  }
  if (pid == 0) {
    // Only async-signal-safe calls until in_child.
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the launcher is already gone
    struct sigaction dfl;
    ::memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGCHLD, SIGPIPE, SIGQUIT}) ::sigaction(s, &dfl, nullptr);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int fd : close_fds) ::close(fd);
    if (devnull >= 0) ::dup2(devnull, 0);
    if (pipes) {
      ::dup2(out[1], 1);
      ::dup2(err[1], 2);
    }
    in_child();
    ::_exit(127);
  }
  ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
  ::setpgid(pid, pid);  // also here, so signals sent right away reach the group
  if (devnull >= 0) ::close(devnull);
  if (!pipes) return Child{pid, -1, -1};
  ::close(out[1]);
  ::close(err[1]);
  for (int fd : {out[0], err[0]}) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  return Child{pid, out[0], err[0]};
}

Child spawn(const std::string& path, const std::vector<std::string>& argv,
            const std::vector<std::string>& env) {
  // Everything the child needs is built here, before fork.
  std::vector<char*> cargv, cenv;
  for (auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  for (auto& e : env) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);
  return fork_child(true, {}, [&] {
    ::execve(path.c_str(), cargv.data(), cenv.data());
    const char msg[] = "braid: exec failed: ";
    (void)!::write(2, msg, sizeof msg - 1);
    const char* why = ::strerror(errno);  // not strictly signal-safe; glibc's is benign
    (void)!::write(2, why, ::strlen(why));
    (void)!::write(2, "\n", 1);
    ::_exit(127);
  });
}

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  if (abbrev) return std::string("SIG") + abbrev;
  return "signal " + std::to_string(sig);
}

int shell_status(int wstatus) {
  if (WIFEXITED(wstatus)) return WEXITSTATUS(wstatus);
  if (WIFSIGNALED(wstatus)) return 128 + WTERMSIG(wstatus);
  return 1;
}

std::string describe_wait_status(int wstatus) {
  if (WIFSIGNALED(wstatus))
    return "was killed by signal " + std::to_string(WTERMSIG(wstatus)) + " (" +
           signal_name(WTERMSIG(wstatus)) + ")";
  return "exited with status " + std::to_string(shell_status(wstatus));
}

}  // namespace braid::launch
