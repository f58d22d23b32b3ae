// The owner's side of hot-key refreshes (ps.h "Hot keys"): a queue and one
// thread that sends each refresh, in order, to every other server over one
// connection per peer and waits for its ack. Private to src/ps.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "braid/ps.h"
#include "braid/store.h"

namespace braid::ps {

// Connects to server `peer`, authenticates and says hello for `shard` with
// `flags` (a chain successor or a hot-key peer). Throws kPeerDied when the
// peer does not accept in time.
int connect_peer(Store& store, const ServerOptions& opt, int peer, int shard, uint16_t flags,
                 int64_t deadline, const std::string& what);

class HotSender {
 public:
  HotSender(const ServerOptions& opt, int servers, std::shared_ptr<Store> store);
  ~HotSender();
  void enqueue(int64_t round, uint64_t rows, std::vector<uint8_t> payload);

 private:
  struct Item {
    int64_t round;
    uint64_t rows;
    std::vector<uint8_t> payload;
  };
  void loop();
  void send(const Item& it);

  const ServerOptions opt_;
  const int servers_;
  std::shared_ptr<Store> store_;
  std::vector<int> fds_;      // by peer; -1 not connected
  std::vector<bool> failed_;  // a peer that failed is not retried
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace braid::ps
