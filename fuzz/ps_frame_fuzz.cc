// A parameter server's every frame (ps/io/wire.h): hello (as a worker, a
// chain predecessor, a peer's hot-key refreshes or a joining server, by
// its flags), push, pull, clock, report, stats, bye, hot push/pull/set,
// batch and join, whatever a connection sends once it has proved the job
// secret. The target runs one real ps::Server (braid/ps_server.h) in this
// process (one shard, ASP), and for each input opens a
// connection, proves the secret, sends the input, closes its sending half
// and reads until the server closes the connection. The server keeps its
// state between inputs, as a long-running one does.
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <openssl/crypto.h>

#include "braid/error.h"
#include "braid/ps_server.h"
#include "comm/store/auth.h"
#include "comm/store/memory_store.h"
#include "fuzz_target.h"
#include "ps_setup.h"
#include "ps/io/socket.h"

namespace {

const char kPsSecret[] = "ps-fuzz-secret";

struct PsUnderFuzz {
  std::shared_ptr<braid::Store> store = braid::comm::make_memory_store();
  std::unique_ptr<braid::ps::Server> server;
  int port = 0;
  PsUnderFuzz() {
    const braid::ps::Layout l = braid::fuzz::ps_layout();
    braid::ps::ServerOptions o = braid::fuzz::ps_options(kPsSecret, 2);
    o.timeout = std::chrono::milliseconds(300);  // a parked request's longest wait
    server = std::make_unique<braid::ps::Server>(l, o, store, std::vector<std::vector<float>>{std::vector<float>(8, 1.f), {}});
    port = server->port();
  }
};

// Lives until the process exits, and is stopped then: its threads end,
// and with them OpenSSL's per-thread state, before OpenSSL's own clean-up
// at exit (registered first here, so it runs after this) and
// LeakSanitizer's check. A connection thread that outlived OpenSSL's
// clean-up kept its state, which the check then reported.
PsUnderFuzz* the_ps = nullptr;

PsUnderFuzz& ps_under_fuzz() {
  if (!the_ps) {
    OPENSSL_init_crypto(0, nullptr);
    the_ps = new PsUnderFuzz;
    std::atexit([] {
      delete the_ps;
      the_ps = nullptr;
    });
  }
  return *the_ps;
}

}  // namespace

BRAID_FUZZ_TARGET(ps_frame) {
  PsUnderFuzz& ps = ps_under_fuzz();
  int fd = -1;
  try {
    fd = braid::ps::connect_tcp("127.0.0.1", ps.port, std::chrono::seconds(5), "ps fuzz");
    braid::comm::authenticate_connect(fd, kPsSecret, std::chrono::seconds(5));
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
