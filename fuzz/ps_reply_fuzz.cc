// What a parameter-server worker reads from its server: the hello's reply,
// then the replies to its push, pull, report and stats requests and to its
// goodbye (ps/io/wire.h), as a real ps::Worker (braid/ps_worker.h) reads
// them. For each input the target plays the server: it listens on
// 127.0.0.1, proves the secret to a fresh worker (300 ms deadlines), reads
// its hello and answers with the input, closes its sending half, then reads
// and discards whatever the worker sends until it hangs up. The worker runs the session
// ps_worker_session (ps_setup.h) asks for, which the seeds recorded
// (record_seeds.cc). ps_frame fuzzes the other direction.
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "braid/env.h"
#include "braid/error.h"
#include "braid/ps_worker.h"
#include "comm/store/auth.h"
#include "comm/store/memory_store.h"
#include "fuzz_target.h"
#include "ps/io/socket.h"
#include "ps/io/wire.h"
#include "ps_setup.h"

BRAID_FUZZ_TARGET(ps_reply) {
  using namespace braid::ps;
  const std::string secret = "ps-reply-fuzz-secret";
  int port = 0;
  const int lfd = listen_tcp("127.0.0.1", &port);
  auto store = braid::comm::make_memory_store();
  store->set_str("ps/server/0", "127.0.0.1:" + std::to_string(port));
  std::thread server([&] {
    int fd = -1;
    try {
      if (!wait_readable(lfd, 5000)) return;
      fd = accept_tcp(lfd);
      if (fd < 0) return;
      braid::comm::authenticate_accept(fd, secret, std::chrono::seconds(5));
      wire::Header hello;
      braid::comm::read_full(fd, &hello, sizeof hello, braid::now_ns() + 5'000'000'000ull, "hello");
      braid::comm::write_full(fd, data, size, braid::now_ns() + 5'000'000'000ull, "replies");
      ::shutdown(fd, SHUT_WR);  // the worker then finds the end of the replies at once
      char buf[4096];
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (std::chrono::steady_clock::now() < until) {
        if (!wait_readable(fd, 100)) continue;
        if (::recv(fd, buf, sizeof buf, 0) <= 0) break;
      }
    } catch (const braid::Error&) {
    }
    if (fd >= 0) ::close(fd);
  });
  try {
    WorkerOptions wo;
    wo.secret = secret;
    wo.shm_bytes = 0;
    wo.timeout = std::chrono::milliseconds(300);
    Worker w(braid::fuzz::ps_layout(), wo, store);
    braid::fuzz::ps_worker_session(w);
  } catch (const braid::Error&) {
  }
  server.join();
  ::close(lfd);
}
