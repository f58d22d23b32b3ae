// A kBatch frame (wire.h): several requests of one worker to one shard in
// one frame, run in order under the shard's one lock.
//
// Bound before reading: a batch carries at most one push and one pull per
// key, one hot pull per sparse key and owner shard (with hot keys on), plus
// a clock, a report and a stats frame (the worker starts a new batch rather
// than repeat one), so its payload is at most that many headers plus the
// largest push and pulls every key of this shard allows. Each sub-frame is
// then checked as a frame of its own (expected_payload, or the replicas'
// check for a hot pull) before it runs, and must end inside the batch.
#include <cstring>

#include "ps/shard/shard_state.h"

namespace braid::ps {

using wire::Header;

uint64_t ShardState::batch_payload(const Header& h, int w) const {
  auto bad = [&](const std::string& why) -> uint64_t {
    throw Error(Errc::kInvalidArgument, where(h) + ": " + why);
  };
  if (opt_.replicas != 1)
    bad("batched requests need replicas 1 (a chain forwards each write on its own)");
  if (h.worker != uint32_t(w)) bad("frame names another worker than this connection's");
  const Layout& layout = store_.layout();
  const uint64_t owners = hot_pulls_.check ? uint64_t(layout.servers() - 1) : 0;
  uint64_t max_frames = 2 * uint64_t(layout.size()) + 3;
  uint64_t bound = h.count * sizeof(Header) + 3 * sizeof(double);
  for (KeyId k = 0; k < layout.size(); ++k) {
    const KeySpec& spec = layout.key(k);
    if (spec.sparse) {
      max_frames += owners;
      bound += uint64_t(spec.rows) * (8 + 8 + uint64_t(spec.width) * 4 + owners * 8);
    } else {
      bound += uint64_t(store_.dense(k).end - store_.dense(k).begin) * 4;
    }
  }
  if (h.count == 0 || h.count > wire::kMaxBatchFrames || h.count > max_frames)
    bad(std::to_string(h.count) + " sub-frames (at most " +
        std::to_string(std::min(wire::kMaxBatchFrames, max_frames)) + " here)");
  if (h.payload < h.count * sizeof(Header) || h.payload > bound)
    bad("payload of " + std::to_string(h.payload) + " bytes for " + std::to_string(h.count) +
        " sub-frames (at most " + std::to_string(bound) + " on this server)");
  return h.payload;
}

void ShardState::handle_batch(const Header& h, const uint8_t* payload, ReplyBuf& out,
                              std::unique_lock<std::mutex>& lk, int64_t deadline_ns) {
  const int w = int(h.worker);
  uint64_t at = 0;
  for (uint64_t i = 0; i < h.count; ++i) {
    // Named only on failure: a batch runs tens of sub-frames.
    auto which = [&] {
      return where(h) + ": sub-frame " + std::to_string(i) + " of " + std::to_string(h.count);
    };
    if (h.payload - at < sizeof(Header))
      throw Error(Errc::kProtocol, which() + " overruns the batch");
    Header sub;
    std::memcpy(&sub, payload + at, sizeof sub);
    at += sizeof sub;
    if (sub.magic != wire::kMagic || !wire::batchable(sub.op))
      throw Error(Errc::kProtocol,
                  which() + " is not a push, pull, clock, report, stats or hot pull frame");
    const bool hot = sub.op == wire::kHotPull;
    if (hot && !hot_pulls_.check)
      throw Error(Errc::kInvalidArgument, which() + " is a hot pull, but hot keys are off");
    if (hot && sub.worker != uint32_t(w))
      throw Error(Errc::kInvalidArgument, which() + " names another worker than this connection's");
    const uint64_t n = hot ? hot_pulls_.check(sub) : expected_payload(sub, w);
    if (sub.payload != n || n > h.payload - at)
      throw Error(Errc::kProtocol, which() + " (" + wire::op_name(sub.op) + ") carries " +
                                       std::to_string(sub.payload) + " bytes, expected " +
                                       std::to_string(n) + " inside the batch");
    const size_t head = out.size();
    out.resize(head + sizeof(Header));
    Header r;
    if (hot) {
      lk.unlock();
      hot_pulls_.run(sub, payload + at, r, out, deadline_ns);
      lk.lock();
    } else {
      handle_locked(sub, payload + at, r, out, lk, deadline_ns);
    }
    std::memcpy(out.data() + head, &r, sizeof r);
    at += n;
  }
  if (at != h.payload)
    throw Error(Errc::kProtocol, where(h) + ": " + std::to_string(h.payload - at) +
                                     " bytes after the last sub-frame");
}

}  // namespace braid::ps
