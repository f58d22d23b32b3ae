// The TCP store's contents and its parked requests, apart from any socket.
//
// The server's event loop hands each request frame body to handle(); the
// answers (immediate, or later for a parked get/wait) come back through the
// Reply callback, tagged with the connection and request ids. Keeping this
// free of I/O lets the loop stay about sockets and this stay about keys.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "braid/store.h"
#include "comm/store/tcp_store_wire.h"

namespace braid::comm {

class StoreState {
 public:
  // May re-enter forget_conn() (a reply can cost its connection).
  using Reply = std::function<void(uint64_t conn, uint64_t req, store_wire::Status,
                                   const Bytes& payload)>;

  explicit StoreState(Reply reply) : reply_(std::move(reply)) {}

  // Runs one request from `conn`. Returns "" when the request was well
  // formed, else why the connection should be dropped.
  std::string handle(uint64_t conn, const uint8_t* body, size_t len);

  // The connection went away: forget its parked requests.
  void forget_conn(uint64_t conn);

  // Answers every parked request whose deadline has passed.
  void expire();

  // Milliseconds until the next deadline (at most 1000).
  int next_timeout_ms() const;

 private:
  struct Waiter {
    uint64_t conn = 0;
    uint64_t req = 0;
    bool is_get = false;
    std::vector<std::string> keys;
    uint64_t deadline = 0;
    int64_t timeout_ms = 0;
  };

  bool has_all(const std::vector<std::string>& keys) const;
  std::string missing_of(const std::vector<std::string>& keys) const;
  std::string park(uint64_t conn, uint64_t req, bool is_get, std::vector<std::string> keys,
                   int64_t timeout_ms);
  void forget_waiter(uint64_t wid);
  void notify(const std::string& key);

  Reply reply_;
  std::unordered_map<std::string, Bytes> data_;
  std::map<uint64_t, Waiter> waiters_;
  uint64_t next_waiter_ = 1;
  std::unordered_map<std::string, std::set<uint64_t>> key_waiters_;
  std::unordered_map<uint64_t, std::set<uint64_t>> conn_waiters_;
  std::set<std::pair<uint64_t, uint64_t>> deadlines_;  // (deadline ns, waiter)
};

}  // namespace braid::comm
