// A parameter server's every frame (ps/io/wire.h): hello (as a worker, a
// chain predecessor, a peer's hot-key refreshes or a joining server, by
// its flags), push, pull, clock, report, stats, bye, hot push/pull/set,
// batch and join, whatever a connection sends once it has proved the job
// secret, on TCP. The target runs one real ps::Server in this process
// (ps_under_fuzz.h), and for each input opens a connection, proves the
// secret, sends the input, closes its sending half and reads until the
// server closes the connection. ps_shm sends the same frames through the
// shared-memory rings instead.
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>

#include "braid/error.h"
#include "comm/store/auth.h"
#include "fuzz_target.h"
#include "ps/io/socket.h"
#include "ps_under_fuzz.h"

BRAID_FUZZ_TARGET(ps_frame) {
  braid::fuzz::PsUnderFuzz& ps = braid::fuzz::ps_under_fuzz();
  int fd = -1;
  try {
    fd = braid::ps::connect_tcp("127.0.0.1", ps.port, std::chrono::seconds(5), "ps fuzz");
    braid::comm::authenticate_connect(fd, braid::fuzz::kPsSecret, std::chrono::seconds(5));
    size_t off = 0;
    while (off < size) {
      ssize_t w = ::send(fd, data + off, size - off, MSG_NOSIGNAL);
      if (w <= 0) break;
      off += size_t(w);
    }
    ::shutdown(fd, SHUT_WR);
    // Whatever the server answers, until it closes (bounded: 5 s).
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    char buf[4096];
    while (std::chrono::steady_clock::now() < until) {
      if (!braid::ps::wait_readable(fd, 100)) continue;
      if (::recv(fd, buf, sizeof buf, 0) <= 0) break;
    }
  } catch (const braid::Error&) {
  }
  if (fd >= 0) ::close(fd);
}
