// A shard's rounds (rounds.h): pushes buffered per round and worker,
// clocks, closing a round (BSP: all W; SSP: all W; k-of-n: K), late pushes,
// how long a pull waits. ASP applies each push as it comes.
#include "ps/consistency/rounds.h"

#include <algorithm>

#include "ps/server_name.h"

namespace braid::ps {

using wire::Header;

Rounds::Rounds(const ServerOptions& opt, ParamStore& store, std::function<void()> on_close)
    : opt_(opt), W_(opt.workers), store_(store), on_close_(std::move(on_close)) {
  clocks_.assign(size_t(W_), 0);
  contributed_.assign(size_t(W_), 0);
}

void Rounds::set_clocks(std::vector<int64_t> clocks, std::vector<int64_t> contributed) {
  clocks_ = std::move(clocks);
  contributed_ = std::move(contributed);
}

void Rounds::restart(int64_t step) {
  closed_ = step;
  clocks_.assign(size_t(W_), step);
}

Rounds::Round& Rounds::round(int64_t r) {
  Round& rd = rounds_[r];
  if (rd.by_worker.empty()) {
    rd.by_worker.resize(size_t(W_));
    rd.clocked.assign(size_t(W_), false);
  }
  return rd;
}

void Rounds::apply_now(const Header& h, const uint8_t* payload) {
  Contribution c;
  store_.add_push(c, h, payload);
  // One frame is one key: a dense slice is its own sum; rows are merged
  // (a push may name a row twice).
  if (!c.sparse.empty()) c = store_.summed({&c});
  store_.apply(c, 1, opt_.lr.at(h.clock));  // lr of the pushing worker's clock
  counters.accepted += 1;
}

void Rounds::late(Contribution&& c, int64_t into) {
  counters.late += 1;
  if (opt_.late == LatePolicy::kDrop || c.empty()) {
    counters.dropped += 1;
    return;
  }
  counters.folded += 1;
  round(into).folded.push_back(std::move(c));
}

void Rounds::push(const Header& h, const uint8_t* payload) {
  const int64_t r = h.clock;
  const int w = int(h.worker);
  const int64_t ahead = opt_.consistency == Consistency::kSsp ? opt_.staleness : 0;
  if (r < closed_) {
    if (opt_.consistency != Consistency::kRoundK)
      throw Error(Errc::kInvalidArgument, frame_where(opt_.rank, h) + ": round " + std::to_string(r) +
                                              " already closed (" + std::to_string(closed_) +
                                              " rounds applied)");
    Contribution c;
    store_.add_push(c, h, payload);
    late(std::move(c), closed_);
    return;
  }
  if (r > closed_ + ahead)
    throw Error(Errc::kInvalidArgument,
                frame_where(opt_.rank, h) + ": push for round " + std::to_string(r) + " while round " +
                    std::to_string(closed_) + " is open (a worker pushes only after its pull)");
  Round& rd = round(r);
  if (rd.clocked[size_t(w)])
    throw Error(Errc::kInvalidArgument,
                frame_where(opt_.rank, h) + ": push after this worker clocked round " + std::to_string(r));
  store_.add_push(rd.by_worker[size_t(w)], h, payload);
  counters.accepted += 1;
}

void Rounds::clock(int w, int64_t r) {
  if (r < closed_) {  // k-of-n: a straggler finishing a closed round
    clocks_[size_t(w)] = std::max(clocks_[size_t(w)], r + 1);
    return;
  }
  Round& rd = round(r);
  if (rd.clocked[size_t(w)])
    throw Error(Errc::kInvalidArgument, server_name(opt_.rank) + ": worker " + std::to_string(w) +
                                            " clocked round " + std::to_string(r) + " twice");
  rd.clocked[size_t(w)] = true;
  rd.n_clocked += 1;
  clocks_[size_t(w)] = std::max(clocks_[size_t(w)], r + 1);
  try_close();
}

void Rounds::clock_async(int w, int64_t r) {
  clocks_[size_t(w)] = std::max(clocks_[size_t(w)], r + 1);
  const int64_t all = *std::min_element(clocks_.begin(), clocks_.end());
  while (closed_ < all) {
    ++closed_;
    on_close_();
  }
}

void Rounds::try_close() {
  const int need = opt_.consistency == Consistency::kRoundK ? opt_.round_k : W_;
  for (;;) {
    auto it = rounds_.find(closed_);
    if (it == rounds_.end() || it->second.n_clocked < need) return;
    Round rd = std::move(it->second);
    rounds_.erase(it);
    // The sum in worker order, then the folded late pushes: a round's
    // result does not depend on the order pushes arrived in.
    std::vector<const Contribution*> parts;
    for (int w = 0; w < W_; ++w) {
      if (rd.clocked[size_t(w)]) {
        parts.push_back(&rd.by_worker[size_t(w)]);
        ++contributed_[size_t(w)];
      } else if (!rd.by_worker[size_t(w)].empty()) {
        // Pushed but not clocked when K others closed the round: late,
        // folded (if so) into the next round.
        late(std::move(rd.by_worker[size_t(w)]), closed_ + 1);
      }
    }
    for (const Contribution& c : rd.folded) parts.push_back(&c);
    const int contributors = int(parts.size());
    const Contribution sum = store_.summed(parts);
    store_.apply(sum, contributors, opt_.lr.at(closed_));
    ++closed_;
    on_close_();
  }
}

int64_t Rounds::needed_by(int64_t c) const {
  switch (opt_.consistency) {
    case Consistency::kAsp: return 0;
    case Consistency::kBsp:
    case Consistency::kRoundK: return c;
    case Consistency::kSsp: return c - opt_.staleness;
  }
  return c;
}

int64_t Rounds::answered(int64_t c) {
  counters.max_read_lead = std::max(counters.max_read_lead, c - closed_);
  return opt_.consistency == Consistency::kRoundK ? std::max(c, closed_) : c;
}

}  // namespace braid::ps
