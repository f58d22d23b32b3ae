#include "launch/signal_pipe.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "braid/error.h"

namespace braid::launch {
namespace {

// The handlers' only state: the write end of the live SignalPipe, -1 when
// none. Claimed with a compare-exchange, so two pipes cannot both install.
std::atomic<int> g_wake_w{-1};

void on_signal(int sig) {
  int saved = errno;
  char c = char(sig);
  int fd = g_wake_w.load();
  if (fd >= 0) (void)!::write(fd, &c, 1);
  errno = saved;
}

}  // namespace

SignalPipe::SignalPipe(const std::string& tool) {
  int p[2];
  if (::pipe2(p, O_NONBLOCK | O_CLOEXEC) != 0) throw_errno("launch: pipe");
  int none = -1;
  if (!g_wake_w.compare_exchange_strong(none, p[1])) {
    ::close(p[0]);
    ::close(p[1]);
    throw Error(Errc::kInvalidArgument, tool + ": another launch is running in this process");
  }
  rd_ = p[0];
  wr_ = p[1];
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  struct sigaction ign;
  std::memset(&ign, 0, sizeof ign);
  ign.sa_handler = SIG_IGN;
  for (int i = 0; i < kCount; ++i)
    ::sigaction(kSignals[i], kSignals[i] == SIGPIPE ? &ign : &sa, &old_[i]);
}

SignalPipe::~SignalPipe() {
  for (int i = 0; i < kCount; ++i) ::sigaction(kSignals[i], &old_[i], nullptr);
  g_wake_w.store(-1);
  ::close(wr_);
  ::close(rd_);
}

void SignalPipe::poke() const {
  char c = 0;
  (void)!::write(wr_, &c, 1);
}

long SignalPipe::read_some(char* b, unsigned long n) const { return long(::read(rd_, b, n)); }

}  // namespace braid::launch
