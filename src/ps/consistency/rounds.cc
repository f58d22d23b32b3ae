// A server's rounds: pushes buffered per round and worker, clocks, closing a
// round (BSP: all W; SSP: all W; k-of-n: K), late pushes, waiting pulls.
// ASP applies each push as it comes. Rules in include/braid/ps.h.
#include <algorithm>
#include <cstring>

#include "braid/env.h"
#include "ps/server_name.h"
#include "ps/shard/shard_state.h"

namespace braid::ps {

using wire::Header;

// The element-wise sum of `parts` in their order, each sparse row once.
// Every element is summed as 0 + parts[0] + parts[1] + ... (a part's
// repeated rows in arrival order), so the result is the same whatever
// order the rows came in. Sparse rows are merged by a sort of (row,
// arrival) rather than a map per row: a round is thousands of rows.
ShardState::Contribution ShardState::summed(const std::vector<const Contribution*>& parts) const {
  Contribution sum;
  for (const Contribution* c : parts)
    for (const auto& [k, g] : c->dense) {
      auto& acc = sum.dense[k];
      if (acc.empty()) acc.assign(g.size(), 0.0f);
      for (size_t i = 0; i < g.size(); ++i) acc[i] += g[i];
    }
  // (row, arrival, gradient): sorted by row then arrival, a row's pushes
  // are summed in arrival order.
  struct Entry {
    int64_t row;
    size_t seq;
    const float* g;
    bool operator<(const Entry& o) const { return row != o.row ? row < o.row : seq < o.seq; }
  };
  std::map<KeyId, std::vector<Entry>> by_key;
  for (const Contribution* c : parts)
    for (const auto& [k, sg] : c->sparse) {
      const size_t width = size_t(layout_.key(k).width);
      auto& v = by_key[k];
      for (size_t r = 0; r < sg.rows.size(); ++r)
        v.push_back({sg.rows[r], v.size(), sg.g.data() + r * width});
    }
  for (auto& [k, v] : by_key) {
    const size_t width = size_t(layout_.key(k).width);
    if (!std::is_sorted(v.begin(), v.end())) std::sort(v.begin(), v.end());
    SparseGrad& out = sum.sparse[k];
    out.rows.reserve(v.size());
    out.g.reserve(v.size() * width);
    for (size_t i = 0; i < v.size(); ++i) {
      if (i == 0 || v[i].row != v[i - 1].row) {
        out.rows.push_back(v[i].row);
        out.g.resize(out.g.size() + width, 0.0f);
      }
      float* acc = out.g.data() + out.g.size() - width;
      for (size_t j = 0; j < width; ++j) acc[j] += v[i].g[j];
    }
  }
  return sum;
}

void ShardState::apply_now(const Header& h, const uint8_t* payload) {
  Contribution c;
  add_push(c, h, payload);
  // One frame is one key: a dense slice is its own sum; rows are merged
  // (a push may name a row twice).
  if (!c.sparse.empty()) c = summed({&c});
  apply(c, 1, h.clock);  // lr of the pushing worker's clock
  st_.pushes_accepted += 1;
}

void ShardState::late(Contribution&& c, int64_t into) {
  st_.pushes_late += 1;
  if (opt_.late == LatePolicy::kDrop || c.empty()) {
    st_.pushes_dropped += 1;
    return;
  }
  st_.pushes_folded += 1;
  round(into).folded.push_back(std::move(c));
}

void ShardState::push(const Header& h, const uint8_t* payload) {
  const int64_t r = h.clock;
  const int w = int(h.worker);
  const int64_t ahead = opt_.consistency == Consistency::kSsp ? opt_.staleness : 0;
  if (r < closed_) {
    if (opt_.consistency != Consistency::kRoundK)
      throw Error(Errc::kInvalidArgument, where(h) + ": round " + std::to_string(r) +
                                              " already closed (" + std::to_string(closed_) +
                                              " rounds applied)");
    Contribution c;
    add_push(c, h, payload);
    late(std::move(c), closed_);
    return;
  }
  if (r > closed_ + ahead)
    throw Error(Errc::kInvalidArgument,
                where(h) + ": push for round " + std::to_string(r) + " while round " +
                    std::to_string(closed_) + " is open (a worker pushes only after its pull)");
  Round& rd = round(r);
  if (rd.clocked[size_t(w)])
    throw Error(Errc::kInvalidArgument,
                where(h) + ": push after this worker clocked round " + std::to_string(r));
  add_push(rd.by_worker[size_t(w)], h, payload);
  st_.pushes_accepted += 1;
}

void ShardState::clock(int w, int64_t r) {
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

void ShardState::clock_async(int w, int64_t r) {
  clocks_[size_t(w)] = std::max(clocks_[size_t(w)], r + 1);
  const int64_t all = *std::min_element(clocks_.begin(), clocks_.end());
  while (closed_ < all) {
    ++closed_;
    st_.rounds_closed = closed_;
    save_locked();
  }
}

void ShardState::try_close() {
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
    const Contribution sum = summed(parts);
    apply(sum, contributors, closed_);
    ++closed_;
    st_.rounds_closed = closed_;
    send_hot_locked();
    cv_.notify_all();
    // Last: a failed save (kIo) reaches the clocking worker as its error,
    // after the round is closed and its waiters are woken.
    save_locked();
  }
}

void ShardState::pull(const Header& h, const uint8_t* payload, Header& reply,
                      ReplyBuf& out, std::unique_lock<std::mutex>& lk,
                      int64_t deadline_ns) {
  const int64_t c = h.clock;
  int64_t need = 0;  // rounds that must be applied first
  switch (opt_.consistency) {
    case Consistency::kAsp: need = 0; break;
    case Consistency::kBsp:
    case Consistency::kRoundK: need = c; break;
    case Consistency::kSsp: need = c - opt_.staleness; break;
  }
  wait_until(lk, deadline_ns, [&] { return closed_ >= need; }, [&] {
    std::string clocks;
    for (int64_t v : clocks_) {
      if (!clocks.empty()) clocks += ',';
      clocks += std::to_string(v);
    }
    return where(h) + " for clock " + std::to_string(c) + ": waited for round " +
           std::to_string(need - 1) + " to close (" + std::to_string(closed_) +
           " closed; worker clocks " + clocks + ")";
  });
  st_.max_read_lead = std::max(st_.max_read_lead, c - closed_);
  reply.clock = opt_.consistency == Consistency::kRoundK ? std::max(c, closed_) : c;
  const KeySpec& spec = layout_.key(h.key);
  const size_t base = out.size();  // the reply is appended (a batch's replies share `out`)
  if (!spec.sparse) {
    const Dense& d = dense_[h.key];
    out.resize(base + h.count * 4);
    std::memcpy(out.data() + base, d.w.data() + (h.offset - uint64_t(d.begin)), h.count * 4);
    return;
  }
  std::vector<int64_t> rows(h.count);
  std::memcpy(rows.data(), payload, h.count * 8);
  for (int64_t r : rows)
    if (r < 0 || r >= spec.rows || layout_.row_server(r) != opt_.rank)
      throw Error(Errc::kInvalidArgument, where(h) + ": row " + std::to_string(r) +
                                              " of key '" + spec.name +
                                              "' is not on this server");
  out.resize(base + h.count * uint64_t(spec.width) * 4);
  float* o = reinterpret_cast<float*>(out.data() + base);
  st_.pulls_owner += int64_t(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    if (hot_) hot_->count(h.key, rows[i]);
    const size_t pos = sparse_row(h.key, rows[i]);
    std::memcpy(o + i * size_t(spec.width), sparse_[h.key].w.data() + pos * size_t(spec.width),
                size_t(spec.width) * 4);
  }
}

void ShardState::handle(const Header& h, const uint8_t* payload, Header& reply,
                        ReplyBuf& out, int64_t deadline_ns) {
  std::unique_lock<std::mutex> lk(mu_);
  out.clear();
  if (!lost_.empty()) throw Error(Errc::kPeerDied, where(h) + ": " + lost_);
  if (h.op != wire::kBatch) {
    handle_locked(h, payload, reply, out, lk, deadline_ns);
    return;
  }
  reply = h;
  reply.op = uint16_t(h.op | wire::kReply);
  reply.status = 0;
  handle_batch(h, payload, out, lk, deadline_ns);
  reply.payload = out.size();
}

void ShardState::handle_locked(const Header& h, const uint8_t* payload, Header& reply,
                               ReplyBuf& out, std::unique_lock<std::mutex>& lk,
                               int64_t deadline_ns) {
  reply = h;
  reply.op = uint16_t(h.op | wire::kReply);
  reply.status = 0;
  reply.payload = 0;
  const size_t base = out.size();
  const int w = int(h.worker);
  if (wire::is_write(h.op)) {
    // A worker's writes reach a shard in request-id order (ps/replication/chain.h), so
    // an id not above the last one applied is a re-send: applied already.
    if (h.req <= last_write_[size_t(w)]) {
      st_.writes_duplicate += 1;
      return;
    }
  }
  switch (h.op) {
    case wire::kHello: break;
    case wire::kPush:
      if (opt_.consistency == Consistency::kAsp) {
        apply_now(h, payload);
        if (h.flags & wire::kAdvance) clock_async(w, h.clock);
        break;
      }
      push(h, payload);
      if (h.flags & wire::kAdvance) clock(w, h.clock);
      break;
    case wire::kClock:
      if (opt_.consistency == Consistency::kAsp)
        clock_async(w, h.clock);
      else
        clock(w, h.clock);
      break;
    case wire::kPull: pull(h, payload, reply, out, lk, deadline_ns); break;
    case wire::kReport: {
      double v[3];
      std::memcpy(v, payload, sizeof v);
      Report& r = reports_[h.clock];
      for (int i = 0; i < 3; ++i) r.sums[i] += v[i];
      r.workers += 1;
      while (reports_.size() > 4096) reports_.erase(reports_.begin());
      break;
    }
    case wire::kStats: {
      if ((h.flags & wire::kWaitRound) && opt_.consistency != Consistency::kAsp)
        wait_until(lk, deadline_ns, [&] { return closed_ > h.clock; }, [&] {
          return where(h) + ": waited for round " + std::to_string(h.clock) + " to close";
        });
      if (h.flags & wire::kWaitOthers)
        wait_until(
            lk, deadline_ns,
            [&] {
              for (int o = 0; o < W_; ++o)
                if (o != w && !finished_[size_t(o)]) return false;
              return true;
            },
            [&] { return where(h) + ": waited for every other worker to finish"; });
      ServerStats s = snapshot_locked();
      auto it = reports_.find(h.clock);
      if (it != reports_.end()) {
        s.report_loss = it->second.sums[0];
        s.report_rows = it->second.sums[1];
        s.report_correct = it->second.sums[2];
        s.report_workers = it->second.workers;
      }
      std::vector<uint8_t> enc;
      wire::encode_stats(s, enc);
      out.append(enc.data(), enc.size());
      break;
    }
    case wire::kBye:
      finished_[size_t(w)] = true;
      cv_.notify_all();
      finished_cv_.notify_all();
      break;
    default:
      throw Error(Errc::kProtocol, where(h) + ": unknown op");
  }
  if (wire::is_write(h.op)) last_write_[size_t(w)] = h.req;
  reply.payload = out.size() - base;
}

}  // namespace braid::ps

namespace braid::ps {

void ShardState::send_hot_locked() {
  if (!hot_ || !hot_sink_) return;
  const std::vector<RowId>& hot = hot_->update();
  st_.hot_rows = int64_t(hot.size());
  if (hot.empty()) return;
  std::vector<uint8_t> payload;
  for (const auto& [k, row] : hot) {
    const int64_t width = layout_.key(k).width;
    const size_t pos = sparse_row(k, row);
    append_hot_row(payload, k, row, sparse_[k].w.data() + pos * size_t(width), width);
  }
  hot_sink_(closed_, hot.size(), std::move(payload));
}

void ShardState::set_hot_sink(HotSink sink) {
  std::lock_guard<std::mutex> lk(mu_);
  hot_sink_ = std::move(sink);
}

void ShardState::hot_set(ReplyBuf& out) const {
  std::lock_guard<std::mutex> lk(mu_);
  out.clear();
  if (!hot_) return;
  for (const auto& [k, row] : hot_->hot()) {
    const int64_t ids[2] = {int64_t(k), row};
    out.append(ids, sizeof ids);
  }
}

void ShardState::count_replica_pulls(int64_t rows) {
  std::lock_guard<std::mutex> lk(mu_);
  st_.pulls_replica += rows;
}

}  // namespace braid::ps
