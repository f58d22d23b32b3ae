// A server's replica of a shard: its parts composed, and the frames that
// run on them (shard_state.h; the consistency rules in
// include/braid/ps_server.h).
#include "ps/shard/shard_state.h"

#include <algorithm>
#include <cstring>

#include "braid/env.h"
#include "ps/checkpoint/shard_checkpoint.h"
#include "ps/server_name.h"

namespace braid::ps {

using wire::Header;

namespace {
// A sparse request may name at most this many rows (bounds the allocation
// a frame can cause before its rows are checked one by one).
constexpr uint64_t kMaxRowsPerFrame = uint64_t(1) << 22;

// The options, checked before any part is built from them.
const ServerOptions& checked(const Layout& layout, const ServerOptions& opt) {
  BRAID_CHECK_ARG(opt.rank >= 0 && opt.rank < layout.servers(),
                  "server rank " + std::to_string(opt.rank) + " outside 0.." +
                      std::to_string(layout.servers() - 1));
  BRAID_CHECK_ARG(opt.workers >= 1, "a parameter server needs at least one worker");
  BRAID_CHECK_ARG(opt.staleness >= 0, "SSP staleness must be >= 0");
  if (opt.consistency == Consistency::kRoundK)
    BRAID_CHECK_ARG(opt.round_k >= 1 && opt.round_k <= opt.workers,
                    "k-of-n needs 1 <= K <= W (K " + std::to_string(opt.round_k) + ", W " +
                        std::to_string(opt.workers) + ")");
  if (opt.hot_keys) {
    BRAID_CHECK_ARG(opt.consistency == Consistency::kBsp || opt.consistency == Consistency::kSsp,
                    std::string("hot keys need bsp or ssp consistency, not ") +
                        consistency_name(opt.consistency));
    BRAID_CHECK_ARG(opt.replicas == 1, "hot keys need --replicas 1 (chains keep no hot copies)");
    BRAID_CHECK_ARG(opt.hot_max_rows >= 1, "hot keys need hot_max_rows >= 1");
  }
  BRAID_CHECK_ARG(opt.save_every >= 0 && opt.save_last >= 0,
                  "checkpoint interval and last round must be >= 0");
  return opt;
}
}  // namespace

ShardState::ShardState(const Layout& layout, const ServerOptions& opt,
                       const std::vector<std::vector<float>>& init,
                       std::function<void(KeyId, int64_t, float*)> init_sparse)
    : opt_(checked(layout, opt)),
      W_(opt.workers),
      store_(layout, opt.rank, opt.rule, init, std::move(init_sparse)),
      rounds_(opt_, store_, [this] { round_closed(); }),
      roster_(opt.workers, opt.rank),
      dedup_(opt.workers) {
  if (opt.hot_keys) hot_ = std::make_unique<HotOwner>(opt.hot_max_rows);
  if (!opt.resume_from.empty()) rounds_.restart(restore_shard(store_, opt_, opt.resume_from));
}

std::string ShardState::where(const Header& h) const { return frame_where(opt_.rank, h); }

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
  const Layout& layout = store_.layout();
  if (h.key >= layout.size())
    bad("unknown key id " + std::to_string(h.key) + " (the layout has " +
        std::to_string(layout.size()) + ")");
  const KeySpec& spec = layout.key(h.key);
  const bool push = h.op == wire::kPush;
  if (!spec.sparse) {
    const ParamStore::Dense& d = store_.dense(h.key);
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
  roster_.attach(w);
}

void ShardState::detach(int w, bool gone) {
  std::lock_guard<std::mutex> lk(mu_);
  roster_.detach(w, gone);
}

std::vector<ShardState::Drop> ShardState::dropped_before(int64_t before_ns) const {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<Drop> out;
  for (int w : roster_.dropped_before(before_ns)) out.push_back({w, rounds_.clocks()[size_t(w)]});
  return out;
}

void ShardState::fail(const std::string& why) {
  std::lock_guard<std::mutex> lk(mu_);
  roster_.fail(why);
  cv_.notify_all();
  finished_cv_.notify_all();
}

void ShardState::stop() {
  std::lock_guard<std::mutex> lk(mu_);
  roster_.stop();
  cv_.notify_all();
}

void ShardState::count_traffic(uint64_t in, uint64_t out, bool rejected) {
  requests_.fetch_add(1, std::memory_order_relaxed);
  bytes_in_.fetch_add(int64_t(in), std::memory_order_relaxed);
  bytes_out_.fetch_add(int64_t(out), std::memory_order_relaxed);
  if (rejected) rejected_.fetch_add(1, std::memory_order_relaxed);
}

ServerStats ShardState::snapshot_locked() const {
  ServerStats s;
  s.rank = opt_.rank;
  s.pushes_accepted = rounds_.counters.accepted;
  s.pushes_late = rounds_.counters.late;
  s.pushes_dropped = rounds_.counters.dropped;
  s.pushes_folded = rounds_.counters.folded;
  s.rounds_closed = rounds_.closed();
  s.updates_applied = store_.updates_applied;
  s.requests = requests_.load(std::memory_order_relaxed);
  s.bytes_in = bytes_in_.load(std::memory_order_relaxed);
  s.bytes_out = bytes_out_.load(std::memory_order_relaxed);
  s.rejected = rejected_.load(std::memory_order_relaxed);
  s.writes_duplicate = dedup_.duplicates;
  s.epoch = epoch_.load(std::memory_order_relaxed);
  s.pulls_owner = pulls_owner_;
  s.pulls_replica = pulls_replica_.load(std::memory_order_relaxed);
  s.hot_rows = hot_ ? hot_->rows() : 0;
  s.clocks = rounds_.clocks();
  s.max_read_lead = rounds_.counters.max_read_lead;
  s.contributed = rounds_.contributed();
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
    if (!roster_.lost().empty()) throw Error(Errc::kPeerDied, what() + ": " + roster_.lost());
    if (roster_.stopping()) throw Error(Errc::kPeerDied, what() + ": the server is stopping");
    int64_t left = deadline_ns - int64_t(now_ns());
    if (left <= 0) throw Error(Errc::kTimeout, what());
    cv_.wait_for(lk, std::chrono::nanoseconds(left));
  }
}

void ShardState::wait_finished(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  const int64_t deadline = wire::deadline_after(timeout);
  while (!roster_.all_finished() || byes_in_flight_ > 0) {
    if (!roster_.lost().empty())
      throw Error(Errc::kPeerDied, server_name(opt_.rank) + ": " + roster_.lost());
    if (int64_t(now_ns()) >= deadline)
      throw Error(Errc::kTimeout, server_name(opt_.rank) +
                                      ": workers still attached after the deadline:" +
                                      roster_.unfinished());
    finished_cv_.wait_for(lk, std::chrono::milliseconds(200));
  }
}

void ShardState::bye_begin() {
  std::lock_guard<std::mutex> lk(mu_);
  ++byes_in_flight_;
}

void ShardState::bye_end() {
  std::lock_guard<std::mutex> lk(mu_);
  --byes_in_flight_;
  finished_cv_.notify_all();
}

void ShardState::round_closed() {
  if (hot_) hot_->after_close(rounds_.closed(), store_);
  cv_.notify_all();
  // Last: a failed save (kIo) reaches the clocking worker as its error,
  // after the round is closed and its waiters are woken.
  save_if_due(store_, opt_, rounds_.closed(), saves_);
}

void ShardState::pull(const Header& h, const uint8_t* payload, Header& reply, ReplyBuf& out,
                      std::unique_lock<std::mutex>& lk, int64_t deadline_ns) {
  const int64_t c = h.clock;
  const int64_t need = rounds_.needed_by(c);  // rounds that must be applied first
  wait_until(lk, deadline_ns, [&] { return rounds_.closed() >= need; }, [&] {
    std::string clocks;
    for (int64_t v : rounds_.clocks()) {
      if (!clocks.empty()) clocks += ',';
      clocks += std::to_string(v);
    }
    return where(h) + " for clock " + std::to_string(c) + ": waited for round " +
           std::to_string(need - 1) + " to close (" + std::to_string(rounds_.closed()) +
           " closed; worker clocks " + clocks + ")";
  });
  reply.clock = rounds_.answered(c);
  store_.read(h, payload, out);
  if (!store_.layout().key(h.key).sparse) return;
  pulls_owner_ += int64_t(h.count);
  if (!hot_) return;
  for (uint64_t i = 0; i < h.count; ++i) {
    int64_t row = 0;
    std::memcpy(&row, payload + i * 8, 8);
    hot_->count(h.key, row);
  }
}

void ShardState::handle(const Header& h, const uint8_t* payload, Header& reply, ReplyBuf& out,
                        int64_t deadline_ns) {
  std::unique_lock<std::mutex> lk(mu_);
  out.clear();
  if (!roster_.lost().empty()) throw Error(Errc::kPeerDied, where(h) + ": " + roster_.lost());
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

void ShardState::stats_frame(const Header& h, ReplyBuf& out, std::unique_lock<std::mutex>& lk,
                             int64_t deadline_ns) {
  if ((h.flags & wire::kWaitRound) && opt_.consistency != Consistency::kAsp)
    wait_until(lk, deadline_ns, [&] { return rounds_.closed() > h.clock; }, [&] {
      return where(h) + ": waited for round " + std::to_string(h.clock) + " to close";
    });
  if (h.flags & wire::kWaitOthers)
    wait_until(
        lk, deadline_ns, [&] { return roster_.others_finished(int(h.worker)); },
        [&] { return where(h) + ": waited for every other worker to finish"; });
  ServerStats s = snapshot_locked();
  reports_.fill(h.clock, s);
  std::vector<uint8_t> enc;
  wire::encode_stats(s, enc);
  out.append(enc.data(), enc.size());
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
  const bool write = wire::is_write(h.op);
  // A re-sent write (replication/write_dedup.h) is acknowledged, not applied.
  if (write && dedup_.duplicate(w, h.req)) return;
  const bool asp = opt_.consistency == Consistency::kAsp;
  switch (h.op) {
    case wire::kHello: break;
    case wire::kPush:
      if (asp) {
        rounds_.apply_now(h, payload);
        if (h.flags & wire::kAdvance) rounds_.clock_async(w, h.clock);
        break;
      }
      rounds_.push(h, payload);
      if (h.flags & wire::kAdvance) rounds_.clock(w, h.clock);
      break;
    case wire::kClock:
      if (asp)
        rounds_.clock_async(w, h.clock);
      else
        rounds_.clock(w, h.clock);
      break;
    case wire::kPull: pull(h, payload, reply, out, lk, deadline_ns); break;
    case wire::kReport: {
      double v[3];
      std::memcpy(v, payload, sizeof v);
      reports_.add(h.clock, v);
      break;
    }
    case wire::kStats: stats_frame(h, out, lk, deadline_ns); break;
    case wire::kBye:
      roster_.finish(w);
      cv_.notify_all();
      finished_cv_.notify_all();
      break;
    default:
      throw Error(Errc::kProtocol, where(h) + ": unknown op");
  }
  if (write) dedup_.applied(w, h.req);
  reply.payload = out.size() - base;
}

void ShardState::set_hot_sink(HotSink sink) {
  std::lock_guard<std::mutex> lk(mu_);
  if (hot_) hot_->set_sink(std::move(sink));
}

void ShardState::hot_set(ReplyBuf& out) const {
  std::lock_guard<std::mutex> lk(mu_);
  out.clear();
  if (hot_) hot_->hot_set(out);
}

void ShardState::set_hot_pulls(HotPulls p) {
  std::lock_guard<std::mutex> lk(mu_);
  hot_pulls_ = std::move(p);
}

void ShardState::transfer_out(const std::string& path) const {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<std::vector<int64_t>> rows;
  Checkpoint ck = shard_checkpoint(store_, opt_, rounds_.closed(), rows);
  add_live(ck, rounds_, roster_, dedup_, reports_);
  save_checkpoint(path, ck);
}

int64_t ShardState::transfer_in(const std::string& path) {
  const Checkpoint ck = load_checkpoint(path);
  std::lock_guard<std::mutex> lk(mu_);
  rounds_.restart(restore_shard_file(store_, opt_, ck, path));
  restore_live(ck, path, store_.layout(), W_, rounds_, roster_, dedup_, reports_);
  return int64_t(rounds_.buffered().size());
}

}  // namespace braid::ps
