// Hot keys' read replicas (ps.h, "Hot keys"). Private to src/ps.
//
// Owner side (HotCounter, inside a shard's HotOwner, hot_owner.h): pulls counted per
// sparse row; at each round close the rule of ps.h picks new hot rows. The
// hot set only grows, so a row a worker was told is hot stays on every
// replica from the refresh that added it on.
//
// Replica side (HotReplicas, one per server): the copies of other shards'
// hot rows, each shard's tagged with the round count (closed rounds) of the
// refresh that carried them. A refresh replaces the values of the rows it
// carries and the tag; refreshes of one shard arrive in round order (one
// sender thread per owner, one connection per peer).
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "braid/ps.h"
#include "ps/io/wire.h"

namespace braid::ps {

using RowId = std::pair<KeyId, int64_t>;

class HotCounter {
 public:
  explicit HotCounter(int max_rows) : max_(size_t(max_rows)) {}
  void count(KeyId k, int64_t row) {
    ++counts_[{k, row}];
    ++total_;
  }
  // Adds the rows the rule selects now (ps.h); returns the hot set.
  const std::vector<RowId>& update();
  const std::vector<RowId>& hot() const { return hot_; }

 private:
  size_t max_;
  std::map<RowId, int64_t> counts_;
  int64_t total_ = 0;
  std::vector<RowId> hot_;
  std::set<RowId> is_hot_;
};

// A refresh's payload: per row int64 key, int64 row, then the key's width
// floats. Appends one row.
void append_hot_row(std::vector<uint8_t>& out, KeyId k, int64_t row, const float* w,
                    int64_t width);

class HotReplicas {
 public:
  HotReplicas(const Layout& layout, const ServerOptions& opt);
  // A kHotPush frame from shard h.key's owner; validates every entry
  // (kProtocol) before changing anything.
  void refresh(const wire::Header& h, const std::vector<uint8_t>& payload);
  // A kHotPull: h.count rows (ids in `rows`) of key h.key owned by shard
  // h.offset, for a worker at h.clock. Waits until the copy is as new as
  // the consistency requires of a pull at that clock and holds every row.
  void pull(const wire::Header& h, const uint8_t* rows, wire::Header& reply,
            std::vector<uint8_t>& out, int64_t deadline_ns);
  // kHotPull's payload length; throws kInvalidArgument for a bad key/shard.
  uint64_t expected_payload(const wire::Header& h) const;
  void stop();

 private:
  struct Copy {
    int64_t round = 0;
    std::map<RowId, std::vector<float>> rows;
  };
  const Layout layout_;
  const ServerOptions opt_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::map<int, Copy> copies_;  // by owner shard
};

}  // namespace braid::ps
