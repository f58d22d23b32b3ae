// The worker's exchange with replicas 1: each connection's frames go as
// kBatch frames (wire.h), so one request — a step's report, pushes, clock,
// pulls, hot pulls and stats — costs one frame each way per server, not one
// per key range, and one recv reads a reply (frame_reader.h).
//
// A connection's frames keep their order: consecutive batchable frames form
// one batch; a frame that is not batchable (hello, bye, hot-set queries)
// goes alone and ends the batch before it; a batch also ends before it
// would repeat an (op, key, owner) triple (owner: a hot pull's owner shard),
// which keeps it inside the bound the server checks (shard_batch.cc).
// Everything is sent before any reply is read, so the servers work on their
// batches together. A lost connection is not re-routed (a chain of one has
// no other member): it fails the request with kPeerDied, and the worker
// refuses further requests (worker.cc).
#include <algorithm>
#include <cstring>
#include <set>
#include <tuple>

#include "braid/env.h"
#include "ps/worker/worker_impl.h"

namespace braid::ps {

namespace {
// Frames of one connection sent as one frame: a batch of several, or one alone.
struct Unit {
  int fd = -1;
  int server = 0;
  std::vector<size_t> frames;
  std::set<std::tuple<uint16_t, uint32_t, uint64_t>> ops;  // (op, key, owner) in the batch
  bool open = false;                            // batchable frames may join
  Header h;                                     // the kBatch header
};
}  // namespace

void Worker::Impl::exchange_batched(std::vector<Frame>& frames, int64_t deadline) {
  std::vector<Unit> units;
  std::map<int, size_t> last;  // connection fd -> its last unit
  for (size_t i = 0; i < frames.size(); ++i) {
    Frame& f = frames[i];
    if (f.done) continue;
    int server = -1;
    const int fd = route(f.server, f.h.op, &server, deadline);
    f.h.epoch = view.epoch();
    const bool batchable = wire::batchable(f.h.op);
    const std::tuple<uint16_t, uint32_t, uint64_t> op_key{
        f.h.op, f.h.key, f.h.op == wire::kHotPull ? f.h.offset : 0};
    auto it = last.find(fd);
    if (batchable && it != last.end()) {
      Unit& u = units[it->second];
      if (u.open && !u.ops.count(op_key) && u.frames.size() < wire::kMaxBatchFrames) {
        u.frames.push_back(i);
        u.ops.insert(op_key);
        continue;
      }
    }
    Unit u;
    u.fd = fd;
    u.server = f.server;
    u.frames.push_back(i);
    u.ops.insert(op_key);
    u.open = batchable;
    last[fd] = units.size();
    units.push_back(std::move(u));
  }

  std::vector<iovec> iov;
  for (Unit& u : units) {
    if (u.frames.size() == 1) {
      Frame& f = frames[u.frames[0]];
      named_io(f.server, f.h.op, [&] {
        link(u.fd).send(f.h, f.ext ? f.ext : f.own.data(), deadline, "send");
      });
      continue;
    }
    u.h = header(wire::kBatch, u.server);
    u.h.epoch = view.epoch();
    u.h.count = u.frames.size();
    iov.clear();
    iov.push_back({&u.h, sizeof u.h});
    for (size_t i : u.frames) {
      Frame& f = frames[i];
      u.h.payload += sizeof f.h + f.h.payload;
      iov.push_back({&f.h, sizeof f.h});
      if (f.h.payload) iov.push_back({const_cast<void*>(f.ext ? f.ext : f.own.data()), f.h.payload});
    }
    named_io(u.server, wire::kBatch, [&] { link(u.fd).send_gather(iov, deadline, "send"); });
  }
  for (Unit& u : units)
    receive(u.fd, u.server, u.frames.size() > 1 ? &u.h : nullptr, u.frames, frames, deadline);
}

// Reads the reply to one unit: `batch` is its kBatch header, or null when
// the unit is the one frame frames[idx[0]]. A batch's reply is checked
// against the most its sub-frames may answer before it is read; up to
// kWholeReply bytes are then received at once, and the sub-frames parsed
// from memory.
void Worker::Impl::receive(int fd, int server, const Header* batch, const std::vector<size_t>& idx,
                           std::vector<Frame>& frames, int64_t deadline) {
  constexpr uint64_t kWholeReply = uint64_t(256) << 10;
  const Header& sent = batch ? *batch : frames[idx[0]].h;
  Link& rd = link(fd);
  const Header r = named_io(server, sent.op, [&] { return rd.header(deadline, "reply"); });
  check_reply(r, sent, server);
  if (r.status != 0) wire::throw_reply(r, read_message(r, fd, server, sent.op, deadline),
                                       who(server, sent.op));
  if (!batch) {
    Frame& f = frames[idx[0]];
    read_reply(f, r, fd, deadline);
    f.done = true;
    count_ack(f);
    return;
  }
  uint64_t most = 0;
  for (size_t i : idx)
    most += sizeof(Header) + (frames[i].reply_into ? wire::kMaxStats : frames[i].reply_bytes);
  if (r.payload > most)
    throw Error(Errc::kProtocol, who(server, sent.op) + ": reply of " + std::to_string(r.payload) +
                                     " bytes to " + std::to_string(idx.size()) +
                                     " sub-frames (at most " + std::to_string(most) + ")");
  if (r.payload <= kWholeReply)
    named_io(server, sent.op, [&] { rd.want(r.payload, deadline, "reply"); });
  uint64_t left = r.payload;
  for (size_t i : idx) {
    Frame& f = frames[i];
    if (left < sizeof(Header))
      throw Error(Errc::kProtocol, who(server, sent.op) + ": reply ends before the reply to its " +
                                       who(f.server, f.h.op));
    const Header sub = named_io(f.server, f.h.op, [&] { return rd.header(deadline, "reply"); });
    left -= sizeof sub;
    if (sub.op != (f.h.op | wire::kReply) || sub.req != f.h.req || sub.status != 0 ||
        sub.payload > left)
      throw Error(Errc::kProtocol, who(f.server, f.h.op) + ": malformed reply inside a batch (op " +
                                       std::to_string(sub.op) + ", request " +
                                       std::to_string(sub.req) + ", " +
                                       std::to_string(sub.payload) + " bytes)");
    read_reply(f, sub, fd, deadline);
    left -= sub.payload;
    f.done = true;
    count_ack(f);
  }
  if (left != 0)
    throw Error(Errc::kProtocol, who(server, sent.op) + ": " + std::to_string(left) +
                                     " bytes after the last reply");
}

}  // namespace braid::ps
