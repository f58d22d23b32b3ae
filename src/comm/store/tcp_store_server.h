// TcpStoreServer::Impl, private to the store server's files:
// tcp_store_server.cc (the event loop, start and stop),
// tcp_store_handshake.cc (authenticating fresh connections on their own
// threads) and tcp_store_conn.cc (a client's requests and responses).
//
// Why the shape:
//  * The job-secret handshake is a blocking exchange (store/auth.h), so each
//    fresh connection runs it on its own short-lived thread with a deadline;
//    a client that stalls mid-handshake ties up only that thread, never the
//    loop. Only authenticated sockets reach the loop.
//  * get/wait park on the server (store/tcp_store_state.h keeps a waiter per
//    request, indexed by key and by deadline) and are answered when the last
//    key arrives or the deadline passes, so clients never poll.
//  * Each read takes a bounded slice from one client and frame lengths are
//    checked before buffering, so one misbehaving client (garbage, oversized
//    lengths, a flood) is dropped without starving the others.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <list>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "braid/store.h"
#include "comm/store/tcp_store_state.h"
#include "comm/store/tcp_store_wire.h"
#include "core/log_limit.h"

namespace braid {

namespace store_server {
constexpr auto kHandshakeTimeout = std::chrono::seconds(10);
constexpr size_t kMaxHandshakes = 256;         // concurrent, unauthenticated
constexpr size_t kMaxPendingOutput = size_t(1) << 30;
constexpr size_t kReadSlice = 256 * 1024;
constexpr uint64_t kListenId = 0;
constexpr uint64_t kWakeId = ~uint64_t(0);
}  // namespace store_server

struct TcpStoreServer::Impl {
  std::string secret;
  int listen_fd = -1;
  int epfd = -1;
  int wake_r = -1, wake_w = -1;
  int port = 0;
  std::atomic<bool> stopping{false};
  std::thread loop_thread;

  // Handshakes: shared between the loop and the handshake threads.
  struct Handshake {
    int fd = -1;  // -1 once closed or handed to the loop
    std::string peer;
    bool finished = false;
    std::thread thread;
  };
  std::mutex hs_mu;
  std::list<Handshake> handshakes;
  std::vector<std::pair<int, std::string>> authenticated;
  LogLimiter stranger_log;  // connections that fail or overflow the handshake

  // Everything below is touched only by the loop thread.
  struct Conn {
    int fd = -1;
    std::string peer;
    std::vector<uint8_t> in;
    size_t in_off = 0;
    std::vector<uint8_t> out;
    size_t out_off = 0;
    bool want_out = false;
  };
  std::unordered_map<uint64_t, Conn> conns;
  uint64_t next_conn = 1;
  comm::StoreState state{[this](uint64_t conn, uint64_t req, comm::store_wire::Status st,
                                const Bytes& payload) {
    respond(conn, req, st, payload);
  }};

  void wake();

  // Handshakes (own threads; tcp_store_handshake.cc).
  void start_handshake(int fd, std::string peer);
  void run_handshake(Handshake* h);
  void reap_handshakes_locked();
  void adopt_authenticated();
  void accept_all();

  // Connections (loop thread; tcp_store_conn.cc).
  void drop(uint64_t id, const std::string& why);
  // Queues a response and tries to send it at once. Returns false if the
  // connection was dropped.
  bool respond(uint64_t id, uint64_t req, comm::store_wire::Status st, const std::vector<uint8_t>& payload);
  bool flush(uint64_t id);
  void on_readable(uint64_t id);

  void loop();
};

}  // namespace braid
