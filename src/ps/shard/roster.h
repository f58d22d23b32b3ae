// A shard's workers as connections see them: which are attached, which said
// goodbye, which went away before it (a lost worker, when it does not come
// back: server/server_lost.cc judges), and whether the job failed or the
// server is stopping. No lock of its own: its ShardState's mutex guards it
// (shard_state.h), whose waits read it. Private to src/ps.
//
// Invariant: dropped_at(w) != 0 while worker w's connection has closed (its
// peer went away) before its goodbye and it has not connected again; once
// lost() is set (fail) every waiter and every later request fails with it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace braid::ps {

class Roster {
 public:
  Roster(int workers, int server);

  // Hello takes a worker id (kInvalidArgument when it is taken); a closed
  // connection gives it back. `gone`: the worker's end closed, not this
  // server dropping it; before its goodbye that makes it a dropped worker.
  void attach(int w);
  void detach(int w, bool gone);
  // The workers dropped at or before `before_ns` (now_ns's clock).
  std::vector<int> dropped_before(int64_t before_ns) const;

  void finish(int w) { finished_[size_t(w)] = true; }  // its goodbye
  const std::vector<bool>& finished() const { return finished_; }
  void set_finished(std::vector<bool> f) { finished_ = std::move(f); }
  bool all_finished() const;
  bool others_finished(int w) const;
  std::string unfinished() const;  // " 1 3": the workers still attached

  // The job lost a worker: the first reason is kept.
  void fail(const std::string& why) {
    if (lost_.empty()) lost_ = why;
  }
  const std::string& lost() const { return lost_; }
  void stop() { stopping_ = true; }
  bool stopping() const { return stopping_; }

 private:
  const int W_, server_;
  std::vector<bool> attached_, finished_;
  std::vector<int64_t> dropped_at_;
  std::string lost_;
  bool stopping_ = false;
};

}  // namespace braid::ps
