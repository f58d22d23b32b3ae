// A server's state and its consistency rules (invariants in shard_state.h,
// the rules themselves in include/braid/ps.h).
#include "ps/shard/shard_state.h"

#include <algorithm>
#include <cstring>

#include "braid/env.h"
#include "ps/server_name.h"
#include "ps/shard/update_rule.h"

namespace braid::ps {

using wire::Header;

namespace {
// A sparse request may name at most this many rows (bounds the allocation
// a frame can cause before its rows are checked one by one).
constexpr uint64_t kMaxRowsPerFrame = uint64_t(1) << 22;
}  // namespace

ShardState::ShardState(const Layout& layout, const ServerOptions& opt,
                       const std::vector<std::vector<float>>& init,
                       std::function<void(KeyId, int64_t, float*)> init_sparse)
    : layout_(layout), opt_(opt), W_(opt.workers), init_sparse_(std::move(init_sparse)) {
  BRAID_CHECK_ARG(opt.rank >= 0 && opt.rank < layout.servers(),
                  "server rank " + std::to_string(opt.rank) + " outside 0.." +
                      std::to_string(layout.servers() - 1));
  BRAID_CHECK_ARG(W_ >= 1, "a parameter server needs at least one worker");
  BRAID_CHECK_ARG(opt.staleness >= 0, "SSP staleness must be >= 0");
  if (opt.consistency == Consistency::kRoundK)
    BRAID_CHECK_ARG(opt.round_k >= 1 && opt.round_k <= W_,
                    "k-of-n needs 1 <= K <= W (K " + std::to_string(opt.round_k) + ", W " +
                        std::to_string(W_) + ")");
  if (opt.hot_keys) {
    BRAID_CHECK_ARG(opt.consistency == Consistency::kBsp || opt.consistency == Consistency::kSsp,
                    std::string("hot keys need bsp or ssp consistency, not ") +
                        consistency_name(opt.consistency));
    BRAID_CHECK_ARG(opt.replicas == 1, "hot keys need --replicas 1 (chains keep no hot copies)");
    BRAID_CHECK_ARG(opt.hot_max_rows >= 1, "hot keys need hot_max_rows >= 1");
    hot_ = std::make_unique<HotCounter>(opt.hot_max_rows);
  }
  BRAID_CHECK_ARG(opt.save_every >= 0 && opt.save_last >= 0,
                  "checkpoint interval and last round must be >= 0");
  BRAID_CHECK_ARG(init.size() == layout.size(),
                  "initial values for " + std::to_string(init.size()) + " keys, layout has " +
                      std::to_string(layout.size()));
  dense_.resize(layout.size());
  sparse_.resize(layout.size());
  const int slots = opt.rule.slots();
  for (KeyId k = 0; k < layout.size(); ++k) {
    const KeySpec& spec = layout.key(k);
    if (spec.sparse) continue;
    BRAID_CHECK_ARG(int64_t(init[k].size()) == spec.size,
                    "initial values of key '" + spec.name + "' have " +
                        std::to_string(init[k].size()) + " elements, the key " +
                        std::to_string(spec.size));
    Dense& d = dense_[k];
    d.begin = layout.slice_begin(k, opt.rank);
    d.end = layout.slice_end(k, opt.rank);
    d.w.assign(init[k].begin() + d.begin, init[k].begin() + d.end);
    d.state.assign(size_t((d.end - d.begin) * slots), 0.0f);
  }
  clocks_.assign(size_t(W_), 0);
  contributed_.assign(size_t(W_), 0);
  attached_.assign(size_t(W_), false);
  finished_.assign(size_t(W_), false);
  dropped_at_.assign(size_t(W_), 0);
  last_write_.assign(size_t(W_), 0);
  st_.rank = opt.rank;
  if (!opt.resume_from.empty()) restore(opt.resume_from);
}

std::string ShardState::where(const Header& h) const {
  return server_name(opt_.rank) + ", worker " + std::to_string(h.worker) + ", " +
         wire::op_name(h.op);
}

uint64_t ShardState::expected_payload(const Header& h, int w) const {
  auto bad = [&](const std::string& why) -> uint64_t {
    throw Error(Errc::kInvalidArgument, where(h) + ": " + why);
  };
  if (w < 0) {
    if (h.op != wire::kHello) bad("the first frame must be hello");
    if (h.worker >= uint32_t(W_))
      bad("worker id out of range 0.." + std::to_string(W_ - 1));
    return 0;
  }
  if (h.worker != uint32_t(w)) bad("frame names another worker than this connection's");
  switch (h.op) {
    case wire::kClock:
    case wire::kStats:
    case wire::kBye: return 0;
    case wire::kReport: return 3 * sizeof(double);
    case wire::kBatch: return batch_payload(h, w);
    case wire::kPush:
    case wire::kPull: break;
    default: bad("unknown op " + std::to_string(h.op));
  }
  if (h.key >= layout_.size())
    bad("unknown key id " + std::to_string(h.key) + " (the layout has " +
        std::to_string(layout_.size()) + ")");
  const KeySpec& spec = layout_.key(h.key);
  const bool push = h.op == wire::kPush;
  if (!spec.sparse) {
    const Dense& d = dense_[h.key];
    if (h.count == 0 || h.offset < uint64_t(d.begin) || h.offset > uint64_t(d.end) ||
        h.count > uint64_t(d.end) - h.offset)
      bad("range [" + std::to_string(h.offset) + ", +" + std::to_string(h.count) + ") of key '" +
          spec.name + "' is not inside this server's slice [" + std::to_string(d.begin) + ", " +
          std::to_string(d.end) + ")");
    const uint64_t want = push ? h.count * 4 : 0;
    if (h.payload != want)
      bad("payload of " + std::to_string(h.payload) + " bytes for " + std::to_string(h.count) +
          " elements of key '" + spec.name + "' (expected " + std::to_string(want) + ")");
    return want;
  }
  if (h.count == 0 || h.count > kMaxRowsPerFrame || h.count > uint64_t(spec.rows))
    bad("row count " + std::to_string(h.count) + " for sparse key '" + spec.name + "'");
  const uint64_t want = h.count * 8 + (push ? h.count * uint64_t(spec.width) * 4 : 0);
  if (h.payload != want)
    bad("payload of " + std::to_string(h.payload) + " bytes for " + std::to_string(h.count) +
        " rows of key '" + spec.name + "' (expected " + std::to_string(want) + ")");
  return want;
}

void ShardState::attach(int w) {
  std::lock_guard<std::mutex> lk(mu_);
  if (attached_[size_t(w)])
    throw Error(Errc::kInvalidArgument,
                server_name(opt_.rank) + ": worker " + std::to_string(w) + " is already connected");
  attached_[size_t(w)] = true;
  dropped_at_[size_t(w)] = 0;
}

void ShardState::detach(int w, bool gone) {
  std::lock_guard<std::mutex> lk(mu_);
  attached_[size_t(w)] = false;
  if (gone && !finished_[size_t(w)] && !stopping_) dropped_at_[size_t(w)] = int64_t(now_ns());
}

std::vector<ShardState::Drop> ShardState::dropped_before(int64_t before_ns) const {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<Drop> out;
  for (int w = 0; w < W_; ++w) {
    const int64_t at = dropped_at_[size_t(w)];
    if (at != 0 && at <= before_ns && !attached_[size_t(w)] && !finished_[size_t(w)])
      out.push_back({w, clocks_[size_t(w)]});
  }
  return out;
}

void ShardState::fail(const std::string& why) {
  std::lock_guard<std::mutex> lk(mu_);
  if (lost_.empty()) lost_ = why;
  cv_.notify_all();
  finished_cv_.notify_all();
}

void ShardState::set_epoch(uint32_t e) {
  std::lock_guard<std::mutex> lk(mu_);
  st_.epoch = e;
}

void ShardState::stop() {
  std::lock_guard<std::mutex> lk(mu_);
  stopping_ = true;
  cv_.notify_all();
}

void ShardState::count_traffic(uint64_t in, uint64_t out, bool rejected) {
  std::lock_guard<std::mutex> lk(mu_);
  st_.requests += 1;
  st_.bytes_in += int64_t(in);
  st_.bytes_out += int64_t(out);
  if (rejected) st_.rejected += 1;
}

ServerStats ShardState::snapshot_locked() const {
  ServerStats s = st_;
  s.clocks = clocks_;
  s.contributed = contributed_;
  s.rounds_closed = closed_;
  return s;
}

ServerStats ShardState::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return snapshot_locked();
}

void ShardState::wait_until(std::unique_lock<std::mutex>& lk, int64_t deadline_ns,
                            const std::function<bool()>& ready,
                            const std::function<std::string()>& what) {
  while (!ready()) {
    if (!lost_.empty()) throw Error(Errc::kPeerDied, what() + ": " + lost_);
    if (stopping_) throw Error(Errc::kPeerDied, what() + ": the server is stopping");
    int64_t left = deadline_ns - int64_t(now_ns());
    if (left <= 0) throw Error(Errc::kTimeout, what());
    cv_.wait_for(lk, std::chrono::nanoseconds(left));
  }
}

void ShardState::wait_finished(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  auto all = [&] { return std::all_of(finished_.begin(), finished_.end(), [](bool b) { return b; }); };
  std::string missing;
  auto what = [&] {
    std::string m;
    for (int w = 0; w < W_; ++w)
      if (!finished_[size_t(w)]) m += " " + std::to_string(w);
    return server_name(opt_.rank) + ": workers still attached after the deadline:" + m;
  };
  const int64_t deadline = wire::deadline_after(timeout);
  while (!all()) {
    if (!lost_.empty()) throw Error(Errc::kPeerDied, server_name(opt_.rank) + ": " + lost_);
    if (int64_t(now_ns()) >= deadline) throw Error(Errc::kTimeout, what());
    finished_cv_.wait_for(lk, std::chrono::milliseconds(200));
  }
}

size_t ShardState::sparse_row(KeyId k, int64_t row) {
  Sparse& sp = sparse_[k];
  auto it = sp.index.find(row);
  if (it != sp.index.end()) return it->second;
  const int64_t width = layout_.key(k).width;
  const size_t pos = sp.index.size();
  sp.index.emplace(row, pos);
  sp.w.resize(sp.w.size() + size_t(width), 0.0f);
  sp.state.resize(sp.state.size() + size_t(width * opt_.rule.slots()), 0.0f);
  if (init_sparse_) init_sparse_(k, row, sp.w.data() + pos * size_t(width));
  return pos;
}

// Row ids of a sparse frame, each checked against the table and this server.
static std::vector<int64_t> frame_rows(const Layout& layout, int server, const Header& h,
                                       const uint8_t* payload, const std::string& where) {
  std::vector<int64_t> rows(h.count);
  std::memcpy(rows.data(), payload, h.count * 8);
  const KeySpec& spec = layout.key(h.key);
  for (int64_t r : rows) {
    if (r < 0 || r >= spec.rows)
      throw Error(Errc::kInvalidArgument, where + ": row " + std::to_string(r) +
                                              " outside sparse key '" + spec.name + "' of " +
                                              std::to_string(spec.rows) + " rows");
    if (layout.row_server(r) != server)
      throw Error(Errc::kInvalidArgument, where + ": row " + std::to_string(r) + " of key '" +
                                              spec.name + "' belongs to server " +
                                              std::to_string(layout.row_server(r)));
  }
  return rows;
}

void ShardState::add_push(Contribution& c, const Header& h, const uint8_t* payload) {
  const KeySpec& spec = layout_.key(h.key);
  if (!spec.sparse) {
    const Dense& d = dense_[h.key];
    std::vector<float>& acc = c.dense[h.key];
    if (acc.empty()) acc.assign(size_t(d.end - d.begin), 0.0f);
    const float* g = reinterpret_cast<const float*>(payload);
    float* a = acc.data() + (h.offset - uint64_t(d.begin));
    for (uint64_t i = 0; i < h.count; ++i) a[i] += g[i];
    return;
  }
  std::vector<int64_t> rows = frame_rows(layout_, opt_.rank, h, payload, where(h));
  const float* g = reinterpret_cast<const float*>(payload + h.count * 8);
  SparseGrad& table = c.sparse[h.key];
  table.rows.insert(table.rows.end(), rows.begin(), rows.end());
  table.g.insert(table.g.end(), g, g + rows.size() * size_t(spec.width));
}

ShardState::Round& ShardState::round(int64_t r) {
  Round& rd = rounds_[r];
  if (rd.by_worker.empty()) {
    rd.by_worker.resize(size_t(W_));
    rd.clocked.assign(size_t(W_), false);
  }
  return rd;
}

void ShardState::apply(const Contribution& sum, int contributors, int64_t r) {
  const float lr = opt_.lr.at(r);
  const float inv = 1.0f / float(std::max(1, contributors));
  std::vector<float> mean;
  for (const auto& [k, g] : sum.dense) {
    Dense& d = dense_[k];
    mean.resize(g.size());
    for (size_t i = 0; i < g.size(); ++i) mean[i] = g[i] * inv;
    apply_update(opt_.rule, d.w.data(), mean.data(), d.state.data(), int64_t(g.size()), lr, ++d.t,
                 layout_.key(k).decay);
  }
  for (const auto& [k, sg] : sum.sparse) {
    Sparse& sp = sparse_[k];
    const int64_t width = layout_.key(k).width;
    const int slots = opt_.rule.slots();
    ++sp.t;
    mean.resize(size_t(width));
    for (size_t r = 0; r < sg.rows.size(); ++r) {
      const size_t pos = sparse_row(k, sg.rows[r]);
      const float* g = sg.g.data() + r * size_t(width);
      for (size_t i = 0; i < size_t(width); ++i) mean[i] = g[i] * inv;
      // A row's slots lie together, slot-major over its width.
      float* state = sp.state.data() + pos * size_t(width * slots);
      apply_update(opt_.rule, sp.w.data() + pos * size_t(width), mean.data(), state, width, lr,
                   sp.t, layout_.key(k).decay);
    }
  }
  st_.updates_applied += 1;
}

}  // namespace braid::ps
