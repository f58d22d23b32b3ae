// The job-secret handshake (comm/store/auth.h) fed a stranger's bytes: the
// first input byte picks the side braid plays (acceptor, as the store, the
// TCP transport and the parameter server do; or connector), the rest is
// what the peer sends before it closes its end. The production functions
// run on one end of a socketpair.
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>

#include "braid/error.h"
#include "comm/store/auth.h"
#include "fuzz_target.h"

BRAID_FUZZ_TARGET(auth) {
  if (size < 1) return;
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return;
  // The whole input fits in the socket buffer: the peer writes it and
  // closes, so braid sees it and then end-of-stream, never a stall.
  const uint8_t* p = data + 1;
  size_t n = std::min<size_t>(size - 1, 4096);
  while (n > 0) {
    ssize_t w = ::send(sv[1], p, n, MSG_NOSIGNAL);
    if (w <= 0) break;
    p += w;
    n -= size_t(w);
  }
  ::shutdown(sv[1], SHUT_WR);
  try {
    if (data[0] & 1)
      braid::comm::authenticate_connect(sv[0], "fuzz-secret", std::chrono::milliseconds(200));
    else
      braid::comm::authenticate_accept(sv[0], "fuzz-secret", std::chrono::milliseconds(200));
  } catch (const braid::Error&) {
  }
  ::close(sv[0]);
  ::close(sv[1]);
}
