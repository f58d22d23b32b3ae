// CompositeTransport: the Transport a communicator holds. It routes each
// peer's requests to the wire that reaches it (self, shm or tcp), checks
// requests at post time, and waits on several wires at once.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/transport/wire.h"

namespace braid::comm {

class CompositeTransport final : public Transport {
 public:
  // cores: host_id -> host_cores().
  CompositeTransport(int rank, std::vector<PeerInfo> peers, std::map<std::string, int> cores)
      : rank_(rank), peers_(std::move(peers)), cores_(std::move(cores)) {}
  int cores_of(int peer) const override { return cores_.at(peers_.at(size_t(peer)).host_id); }

  void post(Request* r) override;
  bool progress() override;
  bool peek(int peer, MsgSig* next) override;
  void wait_activity(std::chrono::microseconds timeout) override;
  int exited_peer() override;
  std::string how_gone(int peer) const override;
  void abort(const std::string& why) override;
  std::string peer_abort_reason() const override;
  std::string kind_to(int peer) const override;
  std::string describe_peer(int peer) const override;
  std::string describe_self() const override;

  // Routes `peers` to `w`. The self wire is not `waitable`: it never has
  // anything to wait for.
  void add(std::unique_ptr<Wire> w, const std::vector<int>& peers, bool waitable);

 private:
  int rank_;
  std::vector<PeerInfo> peers_;
  std::map<std::string, int> cores_;  // host_id -> host_cores
  std::vector<std::unique_ptr<Wire>> owned_;
  std::vector<Wire*> wires_, waitable_, route_;
  Wire* self_ = nullptr;
};

}  // namespace braid::comm
