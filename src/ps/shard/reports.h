// The workers' training-log reports a shard keeps (Worker::report, wire
// kReport): per round, the sums of the loss, rows and correct predictions
// the workers reported and how many did; a stats request for that round
// reads them back (ServerStats::report_*), which is how worker 0 logs the
// global batch's loss without a round trip of its own. The newest 4096
// rounds are kept. No lock of its own: its ShardState's mutex guards it.
// Private to src/ps.
#pragma once

#include <cstdint>
#include <map>

#include "braid/ps.h"

namespace braid::ps {

class Reports {
 public:
  struct Report {
    double sums[3] = {0, 0, 0};
    int workers = 0;
  };
  void add(int64_t round, const double v[3]) {
    Report& r = by_round_[round];
    for (int i = 0; i < 3; ++i) r.sums[i] += v[i];
    r.workers += 1;
    while (by_round_.size() > 4096) by_round_.erase(by_round_.begin());
  }
  // Round `round`'s sums into s (left as they are when none came).
  void fill(int64_t round, ServerStats& s) const {
    auto it = by_round_.find(round);
    if (it == by_round_.end()) return;
    s.report_loss = it->second.sums[0];
    s.report_rows = it->second.sums[1];
    s.report_correct = it->second.sums[2];
    s.report_workers = it->second.workers;
  }
  // Every round's (a chain joiner copies them: checkpoint/shard_transfer.cc).
  std::map<int64_t, Report>& all() { return by_round_; }
  const std::map<int64_t, Report>& all() const { return by_round_; }

 private:
  std::map<int64_t, Report> by_round_;
};

}  // namespace braid::ps
