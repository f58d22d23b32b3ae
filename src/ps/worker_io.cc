// A worker request as frames, and their exchange with the servers (why the
// shape: worker.cc's top comment).
#include <cstring>

#include "ps/worker_impl.h"

namespace braid::ps {

namespace {
// Positions in kd.rows of the rows each server owns, rows range-checked.
std::vector<std::vector<size_t>> group_rows(const Layout& layout, const KeyData& kd) {
  const KeySpec& spec = layout.key(kd.key);
  std::vector<std::vector<size_t>> by_server(static_cast<size_t>(layout.servers()));
  for (size_t i = 0; i < kd.rows.size(); ++i) {
    BRAID_CHECK_ARG(kd.rows[i] >= 0 && kd.rows[i] < spec.rows,
                    "row " + std::to_string(kd.rows[i]) + " outside sparse key '" + spec.name +
                        "' of " + std::to_string(spec.rows) + " rows");
    by_server[size_t(layout.row_server(kd.rows[i]))].push_back(i);
  }
  return by_server;
}
}  // namespace

void Worker::Impl::exchange(std::vector<Frame>& frames) {
  const int64_t deadline = wire::deadline_after(opt.timeout);
  for (Frame& f : frames) {
    const void* p = f.ext ? f.ext : f.own.data();
    wire::send_frame(fds[size_t(f.server)], f.h, p, deadline, who(f.server, f.h.op).c_str());
  }
  std::vector<float> tmp;
  for (Frame& f : frames) {
    const int fd = fds[size_t(f.server)];
    const std::string w = who(f.server, f.h.op);
    Header r = wire::recv_header(fd, deadline, w.c_str());
    if (r.op != (f.h.op | wire::kReply) || r.req != f.h.req)
      throw Error(Errc::kProtocol, w + ": reply out of order (op " + std::to_string(r.op) +
                                       ", request " + std::to_string(r.req) + ")");
    if (r.status != 0) {
      if (r.payload > wire::kMaxMessage)
        throw Error(Errc::kProtocol, w + ": error reply of " + std::to_string(r.payload) + " bytes");
      std::string msg(r.payload, '\0');
      wire::recv_payload(fd, msg.data(), msg.size(), deadline, w.c_str());
      wire::throw_reply(r, msg, w);
    }
    if (f.reply_into) {
      if (r.payload > wire::kMaxStats)
        throw Error(Errc::kProtocol, w + ": reply of " + std::to_string(r.payload) + " bytes");
      f.reply_into->resize(r.payload);
      wire::recv_payload(fd, f.reply_into->data(), r.payload, deadline, w.c_str());
      continue;
    }
    if (r.payload != f.reply_bytes)
      throw Error(Errc::kProtocol, w + ": reply of " + std::to_string(r.payload) +
                                       " bytes, expected " + std::to_string(f.reply_bytes));
    if (f.assigned) *f.assigned = std::min(*f.assigned, r.clock);
    if (f.dest) {
      wire::recv_payload(fd, f.dest, r.payload, deadline, w.c_str());
    } else if (f.sparse_base) {
      tmp.resize(r.payload / 4);
      wire::recv_payload(fd, tmp.data(), r.payload, deadline, w.c_str());
      for (size_t i = 0; i < f.sparse_pos.size(); ++i)
        std::memcpy(f.sparse_base + f.sparse_pos[i] * size_t(f.width),
                    tmp.data() + i * size_t(f.width), size_t(f.width) * 4);
    }
  }
}

std::vector<Frame> Worker::Impl::dense_frames(const KeyData& kd, uint16_t op) {
  std::vector<Frame> frames;
  for (int s = 0; s < layout.servers(); ++s) {
    const int64_t b = layout.slice_begin(kd.key, s), e = layout.slice_end(kd.key, s);
    if (b == e) continue;
    Frame f;
    f.server = s;
    f.h = header(op, s);
    f.h.key = kd.key;
    f.h.offset = uint64_t(b);
    f.h.count = uint64_t(e - b);
    frames.push_back(std::move(f));
  }
  return frames;
}

std::vector<Frame> Worker::Impl::push_frames(const std::vector<KeyData>& grads, int64_t clock,
                                             bool advance) {
  std::vector<Frame> frames;
  const int S = layout.servers();
  for (const KeyData& kd : grads) {
    const KeySpec& spec = layout.key(kd.key);
    BRAID_CHECK_ARG(kd.data != nullptr, "push of key '" + spec.name + "' without data");
    if (!spec.sparse) {
      for (Frame& f : dense_frames(kd, wire::kPush)) {
        f.h.payload = f.h.count * 4;
        f.ext = kd.data + f.h.offset;
        frames.push_back(std::move(f));
      }
      continue;
    }
    const std::vector<std::vector<size_t>> by_server = group_rows(layout, kd);
    for (int s = 0; s < S; ++s) {
      const auto& idx = by_server[size_t(s)];
      if (idx.empty()) continue;
      Frame f;
      f.server = s;
      f.h = header(wire::kPush, s);
      f.h.key = kd.key;
      f.h.count = idx.size();
      f.h.payload = idx.size() * (8 + uint64_t(spec.width) * 4);
      f.own.resize(f.h.payload);
      int64_t* ids = reinterpret_cast<int64_t*>(f.own.data());
      float* g = reinterpret_cast<float*>(f.own.data() + idx.size() * 8);
      for (size_t i = 0; i < idx.size(); ++i) {
        ids[i] = kd.rows[idx[i]];
        std::memcpy(g + i * size_t(spec.width), kd.data + idx[i] * size_t(spec.width),
                    size_t(spec.width) * 4);
      }
      frames.push_back(std::move(f));
    }
  }
  if (advance) {
    std::vector<bool> named(size_t(S), false);
    for (auto it = frames.rbegin(); it != frames.rend(); ++it)
      if (!named[size_t(it->server)]) {
        named[size_t(it->server)] = true;
        it->h.flags |= wire::kAdvance;
      }
    for (int s = 0; s < S; ++s)
      if (!named[size_t(s)]) {
        Frame f;
        f.server = s;
        f.h = header(wire::kClock, s);
        frames.push_back(std::move(f));
      }
  }
  for (Frame& f : frames) f.h.clock = clock;
  return frames;
}

std::vector<Frame> Worker::Impl::pull_frames(const std::vector<KeyData>& out, int64_t clock,
                                             int64_t* assigned) {
  std::vector<Frame> frames;
  const int S = layout.servers();
  for (const KeyData& kd : out) {
    const KeySpec& spec = layout.key(kd.key);
    BRAID_CHECK_ARG(kd.data != nullptr, "pull of key '" + spec.name + "' without a buffer");
    if (!spec.sparse) {
      for (Frame& f : dense_frames(kd, wire::kPull)) {
        f.dest = kd.data + f.h.offset;
        f.reply_bytes = f.h.count * 4;
        f.assigned = assigned;
        frames.push_back(std::move(f));
      }
      continue;
    }
    const std::vector<std::vector<size_t>> by_server = group_rows(layout, kd);
    for (int s = 0; s < S; ++s) {
      if (by_server[size_t(s)].empty()) continue;
      Frame f;
      f.server = s;
      f.h = header(wire::kPull, s);
      f.h.key = kd.key;
      f.h.count = by_server[size_t(s)].size();
      f.h.payload = f.h.count * 8;
      f.own.resize(f.h.payload);
      int64_t* ids = reinterpret_cast<int64_t*>(f.own.data());
      for (size_t i = 0; i < f.h.count; ++i) ids[i] = kd.rows[by_server[size_t(s)][i]];
      f.sparse_base = kd.data;
      f.sparse_pos = by_server[size_t(s)];
      f.width = spec.width;
      f.reply_bytes = f.h.count * uint64_t(spec.width) * 4;
      f.assigned = assigned;
      frames.push_back(std::move(f));
    }
  }
  for (Frame& f : frames) f.h.clock = clock;
  return frames;
}

}  // namespace braid::ps
