// A shard's record of each worker's last applied write (push, clock,
// report, bye). A worker's writes reach a shard in request-id order
// (replication/chain.h), so a write whose id is not above the last one
// applied is a re-send after a chain fail-over: acknowledged without being
// applied again, and counted. No lock of its own: its ShardState's mutex
// guards it (shard_state.h). Private to src/ps.
#pragma once

#include <cstdint>
#include <vector>

namespace braid::ps {

class WriteDedup {
 public:
  explicit WriteDedup(int workers) : last_(size_t(workers), 0) {}
  // Whether worker w's write `req` was applied already (then counted).
  bool duplicate(int w, uint64_t req) {
    if (req > last_[size_t(w)]) return false;
    duplicates += 1;
    return true;
  }
  void applied(int w, uint64_t req) { last_[size_t(w)] = req; }
  const std::vector<uint64_t>& last() const { return last_; }
  void set_last(std::vector<uint64_t> last) { last_ = std::move(last); }
  int64_t duplicates = 0;  // ServerStats::writes_duplicate

 private:
  std::vector<uint64_t> last_;
};

}  // namespace braid::ps
