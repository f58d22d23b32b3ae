// The supervisor's signals as bytes on a pipe: while a SignalPipe lives,
// SIGINT, SIGTERM, SIGHUP, SIGUSR1 and SIGCHLD each write their number to a
// non-blocking self-pipe (so a poll() loop wakes for them, a rank's exit
// included) and SIGPIPE is ignored (a closed output pipe must not kill the
// launcher). The destructor restores the previous dispositions.
//
// One SignalPipe per process at a time (the handlers are process-wide);
// constructing a second throws Error(kInvalidArgument).
#pragma once

#include <signal.h>

#include <string>

namespace braid::launch {

class SignalPipe {
 public:
  explicit SignalPipe(const std::string& tool);
  ~SignalPipe();
  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;

  // The read end, for poll(); and both ends, for a forked child to close.
  int fd() const { return rd_; }
  int write_fd() const { return wr_; }
  // Wakes the reader from any thread with byte 0 ("no signal; look again").
  void poke() const;
  // Reads what is queued; calls on(sig) for each signal byte (0 skipped).
  template <class F>
  void drain(F&& on) const {
    char b[64];
    long k;
    while ((k = read_some(b, sizeof b)) > 0)
      for (long j = 0; j < k; ++j)
        if (b[j] != 0) on(int(b[j]));
  }

 private:
  long read_some(char* b, unsigned long n) const;

  static constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGCHLD, SIGPIPE};
  static constexpr int kCount = sizeof kSignals / sizeof kSignals[0];
  int rd_ = -1, wr_ = -1;
  struct sigaction old_[kCount];
};

}  // namespace braid::launch
