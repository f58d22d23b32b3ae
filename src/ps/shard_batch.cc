// A kBatch frame (wire.h): several requests of one worker to one shard in
// one frame, run in order under the shard's one lock.
//
// Bound before reading: a batch carries at most one push and one pull per
// key plus a clock, a report and a stats frame (the worker starts a new
// batch rather than repeat one), so its payload is at most that many
// headers plus the largest push and pull every key of this shard allows.
// Each sub-frame is then checked as a frame of its own (expected_payload)
// before it runs, and must end inside the batch.
#include <cstring>

#include "ps/shard_state.h"

namespace braid::ps {

using wire::Header;

uint64_t ShardState::batch_payload(const Header& h, int w) const {
  auto bad = [&](const std::string& why) -> uint64_t {
    throw Error(Errc::kInvalidArgument, where(h) + ": " + why);
  };
  if (opt_.replicas != 1)
    bad("batched requests need replicas 1 (a chain forwards each write on its own)");
  if (h.worker != uint32_t(w)) bad("frame names another worker than this connection's");
  const uint64_t max_frames = 2 * uint64_t(layout_.size()) + 3;
  if (h.count == 0 || h.count > wire::kMaxBatchFrames || h.count > max_frames)
    bad(std::to_string(h.count) + " sub-frames (at most " +
        std::to_string(std::min(wire::kMaxBatchFrames, max_frames)) + " here)");
  uint64_t bound = h.count * sizeof(Header) + 3 * sizeof(double);
  for (KeyId k = 0; k < layout_.size(); ++k) {
    const KeySpec& spec = layout_.key(k);
    if (spec.sparse)
      bound += uint64_t(spec.rows) * (8 + 8 + uint64_t(spec.width) * 4);
    else
      bound += uint64_t(dense_[k].end - dense_[k].begin) * 4;
  }
  if (h.payload < h.count * sizeof(Header) || h.payload > bound)
    bad("payload of " + std::to_string(h.payload) + " bytes for " + std::to_string(h.count) +
        " sub-frames (at most " + std::to_string(bound) + " on this server)");
  return h.payload;
}

void ShardState::handle_batch(const Header& h, const uint8_t* payload, std::vector<uint8_t>& out,
                              std::unique_lock<std::mutex>& lk, int64_t deadline_ns) {
  const int w = int(h.worker);
  uint64_t at = 0;
  for (uint64_t i = 0; i < h.count; ++i) {
    const std::string which = where(h) + ": sub-frame " + std::to_string(i) + " of " +
                              std::to_string(h.count);
    if (h.payload - at < sizeof(Header)) throw Error(Errc::kProtocol, which + " overruns the batch");
    Header sub;
    std::memcpy(&sub, payload + at, sizeof sub);
    at += sizeof sub;
    if (sub.magic != wire::kMagic || !wire::batchable(sub.op))
      throw Error(Errc::kProtocol, which + " is not a push, pull, clock, report or stats frame");
    const uint64_t n = expected_payload(sub, w);
    if (sub.payload != n || n > h.payload - at)
      throw Error(Errc::kProtocol, which + " (" + wire::op_name(sub.op) + ") carries " +
                                       std::to_string(sub.payload) + " bytes, expected " +
                                       std::to_string(n) + " inside the batch");
    const size_t head = out.size();
    out.resize(head + sizeof(Header));
    Header r;
    handle_locked(sub, payload + at, r, out, lk, deadline_ns);
    std::memcpy(out.data() + head, &r, sizeof r);
    at += n;
  }
  if (at != h.payload)
    throw Error(Errc::kProtocol, where(h) + ": " + std::to_string(h.payload - at) +
                                     " bytes after the last sub-frame");
}

}  // namespace braid::ps
