// The parameter server that the ps_frame and ps_shm targets send their
// inputs to: one real ps::Server (braid/ps_server.h) in this process, one
// shard, ASP, two workers (ps_setup.h), kept between inputs as a
// long-running server keeps its state.
#pragma once

#include <chrono>
#include <cstdlib>
#include <memory>
#include <vector>

#include <openssl/crypto.h>

#include "braid/ps_server.h"
#include "comm/store/memory_store.h"
#include "ps_setup.h"

namespace braid::fuzz {

constexpr char kPsSecret[] = "ps-fuzz-secret";

struct PsUnderFuzz {
  std::shared_ptr<Store> store = comm::make_memory_store();
  std::unique_ptr<ps::Server> server;
  int port = 0;
  PsUnderFuzz() {
    ps::ServerOptions o = ps_options(kPsSecret, 2);
    o.timeout = std::chrono::milliseconds(300);  // a parked request's longest wait
    server = std::make_unique<ps::Server>(ps_layout(), o, store,
                                          std::vector<std::vector<float>>{std::vector<float>(8, 1.f), {}});
    port = server->port();
  }
};

// Made at the first input; stopped when the process exits, so that its
// threads have ended before OpenSSL's own clean-up at exit (initialised
// first here, so its clean-up runs after this) and LeakSanitizer's check.
inline PsUnderFuzz& ps_under_fuzz() {
  static PsUnderFuzz* the_ps = nullptr;
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

}  // namespace braid::fuzz
