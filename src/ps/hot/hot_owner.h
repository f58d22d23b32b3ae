// Hot keys' owner side inside a shard (hot_keys.h has the rule and the
// replicas): counts the pulls of each sparse row, and at each round close
// adds the rows the rule picks and hands the current values of every hot
// row to the sink, which queues them for the other servers (hot_sender.h).
// No lock of its own: its ShardState's mutex guards it. Private to src/ps.
#pragma once

#include <functional>
#include <vector>

#include "ps/hot/hot_keys.h"
#include "ps/io/reply_buf.h"
#include "ps/shard/param_store.h"

namespace braid::ps {

class HotOwner {
 public:
  // `sink` gets each refresh (closed rounds, rows, payload); it is called
  // under the shard's mutex, so it must only queue.
  using Sink = std::function<void(int64_t round, uint64_t rows, std::vector<uint8_t>)>;
  explicit HotOwner(int max_rows) : counter_(max_rows) {}
  void count(KeyId k, int64_t row) { counter_.count(k, row); }
  void set_sink(Sink sink) { sink_ = std::move(sink); }
  // After round `closed` closed (nothing without a sink).
  void after_close(int64_t closed, ParamStore& store);
  // A kHotSet reply: the hot rows' (key, row) ids.
  void hot_set(ReplyBuf& out) const;
  int64_t rows() const { return rows_; }  // ServerStats::hot_rows

 private:
  HotCounter counter_;
  Sink sink_;
  int64_t rows_ = 0;
};

}  // namespace braid::ps
