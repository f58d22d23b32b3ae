// Reading configuration from the environment, and small process utilities.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace braid {

// The value of NAME, or nullopt when unset or empty.
std::optional<std::string> env_str(const char* name);
// NAME parsed as an integer; `fallback` when unset. Throws Error naming NAME
// and the bad value when set to something that is not an integer.
int64_t env_int(const char* name, int64_t fallback);
// NAME parsed as seconds (fractions allowed); `fallback` when unset.
std::chrono::milliseconds env_seconds(const char* name, std::chrono::milliseconds fallback);
bool env_flag(const char* name);  // "1", "true", "yes", "on"

// The default deadline for blocking operations: BRAID_TIMEOUT seconds, 300.
std::chrono::milliseconds default_timeout();

// This machine's name, or BRAID_HOSTNAME when set.
std::string hostname();

// Monotonic time in seconds / nanoseconds.
double now_s();
uint64_t now_ns();
// Wall-clock seconds since the epoch: comparable between processes (a
// death stamped by one, a join by another), unlike now_s.
double wall_s();

// Cores this process may run on (its CPU affinity), at least 1.
int usable_cores();
// The cores each of `ranks_sharing` processes that share this process's
// cores may use: usable_cores() / ranks_sharing, at least 1. The default
// compute thread count of a rank (braid run passes it as OMP_NUM_THREADS).
int cores_per_rank(int ranks_sharing);

// Nanoseconds the calling thread has spent ready to run but waiting for a
// core (the second field of /proc/thread-self/schedstat), or -1 where the
// kernel does not say. Cheap enough to call often: the file stays open per
// thread (one pread a call).
int64_t thread_run_delay_ns();
// CPU seconds the calling thread has run.
double thread_cpu_s();

// The share of a core the calling thread had since construction: 1 −
// (time it waited for a core) / (wall time). Unlike CPU time / wall time it
// does not count a wait that sleeps (a TCP link whose round trip outlasts
// the spin) as lost, only time another task held the core this thread
// wanted. Falls back to CPU time / wall time without schedstat. The
// probes of links and GEMMs judge by it whether what they measured is
// the machine's (comm::kMinCoreShare).
class CoreShare {
 public:
  CoreShare();
  double get() const;

 private:
  int64_t delay0_;
  double cpu0_, wall0_;
};

// Peak resident set size of this process, in bytes (from getrusage).
uint64_t peak_rss_bytes();

}  // namespace braid
