// The worker's exchange with replicas 1: each connection's frames go as
// kBatch frames (wire.h), so one request — a step's report, pushes, clock,
// pulls and stats — costs one frame each way per server, not one per key
// range.
//
// A connection's frames keep their order: consecutive batchable frames form
// one batch; a frame that is not batchable (hello, bye, hot keys) goes
// alone and ends the batch before it; a batch also ends before it would
// repeat an (op, key) pair, which keeps it inside the bound the server
// checks (shard_batch.cc). Everything is sent before any reply is read, so
// the servers work on their batches together. A lost connection is not
// re-routed (a chain of one has no other member): it fails the request with
// kPeerDied, and the worker refuses further requests (worker.cc).
#include <algorithm>
#include <cstring>
#include <set>

#include "braid/env.h"
#include "ps/worker_impl.h"

namespace braid::ps {

namespace {
// Frames of one connection sent as one frame: a batch of several, or one alone.
struct Unit {
  int fd = -1;
  int server = 0;
  std::vector<size_t> frames;
  std::set<std::pair<uint16_t, uint32_t>> ops;  // (op, key) in the batch
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
    const std::pair<uint16_t, uint32_t> op_key{f.h.op, f.h.key};
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
    const std::string w = who(u.server, wire::kBatch);
    if (u.frames.size() == 1) {
      Frame& f = frames[u.frames[0]];
      wire::send_frame(u.fd, f.h, f.ext ? f.ext : f.own.data(), deadline,
                       who(f.server, f.h.op).c_str());
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
    wire::write_gather(u.fd, iov, deadline, w.c_str());
  }

  std::vector<float> tmp;
  auto fail = [&](const Header& r, int fd, const std::string& w) {
    if (r.payload > wire::kMaxMessage)
      throw Error(Errc::kProtocol, w + ": error reply of " + std::to_string(r.payload) + " bytes");
    std::string msg(r.payload, '\0');
    wire::recv_payload(fd, msg.data(), msg.size(), deadline, w.c_str());
    wire::throw_reply(r, msg, w);
  };
  for (Unit& u : units) {
    const bool batch = u.frames.size() > 1;
    const Header& sent = batch ? u.h : frames[u.frames[0]].h;
    const std::string w = who(u.server, sent.op);
    Header r = wire::recv_header(u.fd, deadline, w.c_str());
    if (r.op != (sent.op | wire::kReply) || r.req != sent.req)
      throw Error(Errc::kProtocol, w + ": reply out of order (op " + std::to_string(r.op) +
                                       ", request " + std::to_string(r.req) + ")");
    if (r.status != 0) fail(r, u.fd, w);
    if (!batch) {
      Frame& f = frames[u.frames[0]];
      read_reply(f, r, u.fd, w, deadline, tmp);
      f.done = true;
      count_ack(f);
      continue;
    }
    uint64_t left = r.payload;
    for (size_t i : u.frames) {
      Frame& f = frames[i];
      const std::string fw = who(f.server, f.h.op);
      if (left < sizeof(Header))
        throw Error(Errc::kProtocol, w + ": reply ends before the reply to its " + fw);
      Header sub = wire::recv_header(u.fd, deadline, fw.c_str());
      left -= sizeof sub;
      if (sub.op != (f.h.op | wire::kReply) || sub.req != f.h.req || sub.status != 0 ||
          sub.payload > left)
        throw Error(Errc::kProtocol, fw + ": malformed reply inside a batch (op " +
                                         std::to_string(sub.op) + ", request " +
                                         std::to_string(sub.req) + ", " +
                                         std::to_string(sub.payload) + " bytes)");
      read_reply(f, sub, u.fd, fw, deadline, tmp);
      left -= sub.payload;
      f.done = true;
      count_ack(f);
    }
    if (left != 0)
      throw Error(Errc::kProtocol, w + ": " + std::to_string(left) + " bytes after the last reply");
  }
}

}  // namespace braid::ps
