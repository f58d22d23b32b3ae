#include "braid/env.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <time.h>

#include "braid/error.h"
#include "braid/settings.h"

namespace braid {

std::optional<std::string> env_str(const char* name) {
  // A BRAID_* setting is declared once, with its default and meaning, in
  // src/core/settings.cc; reading an undeclared one is a bug in braid.
  if (std::strncmp(name, "BRAID_", 6) == 0 && find_setting(name) == nullptr)
    throw Error(Errc::kInternal, std::string(name) +
                                     " is read but not declared in src/core/settings.cc");
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

int64_t env_int(const char* name, int64_t fallback) {
  auto v = env_str(name);
  if (!v) return fallback;
  try {
    size_t pos = 0;
    long long x = std::stoll(*v, &pos, 10);
    if (pos != v->size()) throw std::invalid_argument("trailing");
    return x;
  } catch (const std::exception&) {
    throw Error(Errc::kInvalidArgument,
                std::string("environment variable ") + name + "='" + *v + "' is not an integer");
  }
}

std::chrono::milliseconds env_seconds(const char* name, std::chrono::milliseconds fallback) {
  auto v = env_str(name);
  if (!v) return fallback;
  try {
    size_t pos = 0;
    double x = std::stod(*v, &pos);
    if (pos != v->size() || !(x > 0)) throw std::invalid_argument("bad");
    return std::chrono::milliseconds(int64_t(x * 1000.0));
  } catch (const std::exception&) {
    throw Error(Errc::kInvalidArgument, std::string("environment variable ") + name + "='" +
                                            *v + "' is not a positive number of seconds");
  }
}

bool env_flag(const char* name) {
  auto v = env_str(name);
  return v && (*v == "1" || *v == "true" || *v == "yes" || *v == "on");
}

std::chrono::milliseconds default_timeout() {
  return env_seconds("BRAID_TIMEOUT", std::chrono::seconds(300));
}

std::string hostname() {
  // BRAID_HOSTNAME overrides the name (tests use it to place ranks of one
  // machine on pretend hosts; clusters use it when hostnames are not unique).
  if (auto v = env_str("BRAID_HOSTNAME")) return *v;
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

double now_s() { return double(now_ns()) * 1e-9; }

double wall_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

int usable_cores() {
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return int(std::max(1u, std::thread::hardware_concurrency()));
}

int cores_per_rank(int ranks_sharing) {
  return std::max(1, usable_cores() / std::max(1, ranks_sharing));
}

double thread_cpu_s() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

CoreShare::CoreShare() : delay0_(thread_run_delay_ns()), cpu0_(thread_cpu_s()), wall0_(now_s()) {}

double CoreShare::get() const {
  const double wall = std::max(now_s() - wall0_, 1e-9);
  const int64_t delay = thread_run_delay_ns();
  if (delay0_ >= 0 && delay >= 0) return std::max(0.0, 1 - double(delay - delay0_) * 1e-9 / wall);
  return (thread_cpu_s() - cpu0_) / wall;
}

int64_t thread_run_delay_ns() {
  // Opened by the thread it describes: /proc/thread-self resolves at open,
  // so a child of fork() (same thread_local, another thread) opens its own.
  struct Stat {
    pid_t tid = -1;
    int fd = -1;
    ~Stat() {
      if (fd >= 0) ::close(fd);
    }
  };
  thread_local Stat st;
  if (st.tid != ::gettid()) {
    if (st.fd >= 0) ::close(st.fd);
    st.tid = ::gettid();
    st.fd = ::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
  }
  if (st.fd < 0) return -1;
  char buf[128];
  const ssize_t n = ::pread(st.fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return -1;
  buf[n] = 0;
  unsigned long long on_cpu = 0, waiting = 0;
  return std::sscanf(buf, "%llu %llu", &on_cpu, &waiting) == 2 ? int64_t(waiting) : -1;
}

uint64_t peak_rss_bytes() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return uint64_t(ru.ru_maxrss) * 1024ull;
}

}  // namespace braid
