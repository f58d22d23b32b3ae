// A worker request as frames, and their exchange with the servers (why the
// shape: worker.cc's top comment).
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "braid/env.h"
#include "braid/log.h"
#include "comm/store/auth.h"
#include "comm/transport/peer_info.h"
#include "ps/io/socket.h"
#include "ps/worker/worker_impl.h"

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

int Worker::Impl::connect(int shard, int server, int64_t deadline) {
  const std::string key = "ps/server/" + std::to_string(server),
                    what = who(shard, wire::kHello) + " (server process " + std::to_string(server) + ")";
  store->wait({key}, opt.timeout);
  const std::string addr = store->get_str(key);
  const size_t colon = addr.rfind(':');
  if (colon == std::string::npos)
    throw Error(Errc::kProtocol, what + ": bad address '" + addr + "' in the store");
  int fd = connect_authenticated(addr.substr(0, colon), std::atoi(addr.c_str() + colon + 1), opt.secret,
                                 opt.timeout, what);
  conns[{shard, server}] = fd;  // closed with the others, also when this throws
  Link& ln = links.insert_or_assign(fd, Link(fd)).first->second;  // a closed fd's number may come back
  Header h = header(wire::kHello, shard);
  h.key = uint32_t(shard);
  h.epoch = view.epoch();
  // A server on this host gets the offer of a segment (link.h); the file
  // the offer names is closed once the server has answered, mapped or not.
  std::unique_ptr<ShmChannel> ch;
  std::string offer;
  if (opt.shm_bytes > 0 && store->check("ps/host/" + std::to_string(server)) &&
      store->get_str("ps/host/" + std::to_string(server)) == comm::host_identity()) {
    try {
      ch = ShmChannel::create(opt.shm_bytes);
      offer = ch->offer();
      h.flags |= wire::kShm;
      h.payload = offer.size();
    } catch (const Error& e) {
      BRAID_LOG(kInfo, what << ": staying on TCP: " << e.what());
    }
  }
  ln.send(h, ch ? offer.data() : nullptr, deadline, what.c_str());
  Header r = ln.header(deadline, what.c_str());
  if (ch) ch->close_offer();
  if (r.status != 0) {
    std::string msg(std::min<uint64_t>(r.payload, wire::kMaxMessage), '\0');
    ln.payload(msg.data(), msg.size(), deadline, what.c_str());
    wire::throw_reply(r, msg, what);
  }
  if (ch && (r.flags & wire::kShm)) {
    ln.use_shm(std::move(ch));
    std::lock_guard<std::mutex> lk(mu);
    counters.shm_links += 1;
  }
  return fd;
}

int Worker::Impl::route(int shard, uint16_t op, int* server, int64_t deadline) {
  try {
    *server = wire::is_write(op) ? view.head(shard) : view.tail(shard);
  } catch (const Error& e) {  // the chain lost every member: name who asked, and for what
    throw Error(e.code(), who(shard, op) + ": " + e.what());
  }
  auto it = conns.find({shard, *server});
  return it != conns.end() ? it->second : connect(shard, *server, deadline);
}

void Worker::Impl::count_ack(const Frame& f) {
  std::lock_guard<std::mutex> lk(mu);
  if (f.h.op == wire::kPush) counters.pushes_acked[size_t(f.server)] += 1;
  if (f.h.op == wire::kClock || (f.h.op == wire::kPush && (f.h.flags & wire::kAdvance)))
    counters.clocks_acked[size_t(f.server)] += 1;
}

namespace {
// A connection that closed or reset: its server process is gone (an error
// reply would have come first otherwise).
bool connection_lost(const Error& e) {
  return e.code() == Errc::kPeerDied || e.code() == Errc::kIo;
}
}  // namespace

// Sends every frame not yet answered, then reads the replies in order.
// Frames whose server was lost are re-sent, after declaring it dead, to
// the shard's new head or tail; a re-sent write that was applied already
// is acknowledged without being applied twice (ps/replication/write_dedup.h). Loops until
// every frame is answered or the deadline passes.
//
// With chains (R > 1) the writes are all acknowledged before any read is
// sent. A read may park at the tail until a round closes; were it queued on
// a connection ahead of a write re-sent there after a fail-over (the tail
// became the head), it would wait for that write forever. Writes never
// park, so a pass over writes always completes or loses a server.
void Worker::Impl::exchange(std::vector<Frame>& frames) {
  const int64_t deadline = wire::deadline_after(opt.timeout);
  if (view.replicas() == 1) {
    exchange_batched(frames, deadline);
    return;
  }
  int64_t lost_at = 0;
  const bool split = view.replicas() > 1;
  for (int phase = split ? 0 : 1; phase < 2;) {
    // phase 0: writes only; phase 1: the rest (everything when not split).
    auto skip = [&](const Frame& f) { return f.done || (phase == 0 && !wire::is_write(f.h.op)); };
    std::vector<int> lost, sent_to(frames.size(), -1);
    auto is_lost = [&](int p) { return std::find(lost.begin(), lost.end(), p) != lost.end(); };
    for (size_t i = 0; i < frames.size(); ++i) {
      Frame& f = frames[i];
      if (skip(f)) continue;
      int p = -1;
      try {
        const int fd = route(f.server, f.h.op, &p, deadline);
        if (is_lost(p)) continue;
        f.h.epoch = view.epoch();
        const void* payload = f.ext ? f.ext : f.own.data();
        named_io(f.server, f.h.op, [&] { link(fd).send(f.h, payload, deadline, "send"); });
        sent_to[i] = p;
      } catch (const Error& e) {
        if (!connection_lost(e) || p < 0) throw;
        lost.push_back(p);
      }
    }
    for (size_t i = 0; i < frames.size(); ++i) {
      Frame& f = frames[i];
      const int p = sent_to[i];
      if (skip(f) || p < 0 || is_lost(p)) continue;
      const int fd = conns.at({f.server, p});
      Header r;
      std::string msg;
      try {
        r = named_io(f.server, f.h.op, [&] { return link(fd).header(deadline, "reply"); });
        check_reply(r, f.h, f.server);
        if (r.status != 0)
          msg = read_message(r, fd, f.server, f.h.op, deadline);
        else
          read_reply(f, r, fd, deadline);
      } catch (const Error& e) {
        if (!connection_lost(e)) throw;
        lost.push_back(p);
        continue;
      }
      if (r.status != 0) wire::throw_reply(r, msg, who(f.server, f.h.op));
      if (r.epoch > view.epoch()) view.refresh();  // e.g. a join: reads move to the new tail
      f.done = true;
      count_ack(f);
    }
    if (lost.empty()) {
      ++phase;
      continue;
    }
    if (!lost_at) lost_at = int64_t(now_ns());
    for (int p : lost) {
      for (auto it = conns.begin(); it != conns.end();)
        if (it->first.second == p) {
          close_conn(it->second);
          it = conns.erase(it);
        } else {
          ++it;
        }
      view.declare_dead(p);
    }
    {
      std::lock_guard<std::mutex> lk(mu);
      counters.reroutes += 1;
    }
    if (int64_t(now_ns()) >= deadline)
      throw Error(Errc::kTimeout, who(frames.front().server, frames.front().h.op) +
                                      ": servers lost and no reply within the deadline");
  }
  if (lost_at) {
    std::lock_guard<std::mutex> lk(mu);
    counters.max_reroute_s =
        std::max(counters.max_reroute_s, double(int64_t(now_ns()) - lost_at) * 1e-9);
  }
}

void Worker::Impl::check_reply(const Header& r, const Header& sent, int server) const {
  if (r.op != (sent.op | wire::kReply) || r.req != sent.req)
    throw Error(Errc::kProtocol, who(server, sent.op) + ": reply out of order (op " +
                                     std::to_string(r.op) + ", request " + std::to_string(r.req) +
                                     ")");
}

std::string Worker::Impl::read_message(const Header& r, int fd, int server, uint16_t op,
                                       int64_t deadline) {
  if (r.payload > wire::kMaxMessage)
    throw Error(Errc::kProtocol,
                who(server, op) + ": error reply of " + std::to_string(r.payload) + " bytes");
  std::string msg(r.payload, '\0');
  named_io(server, op,
           [&] { link(fd).payload(msg.data(), msg.size(), deadline, "error reply"); });
  return msg;
}

void Worker::Impl::read_reply(Frame& f, const Header& r, int fd, int64_t deadline) {
  Link& rd = link(fd);
  if (f.reply_into) {
    if (r.payload > wire::kMaxStats)
      throw Error(Errc::kProtocol,
                  who(f.server, f.h.op) + ": reply of " + std::to_string(r.payload) + " bytes");
    f.reply_into->resize(r.payload);
    named_io(f.server, f.h.op,
       [&] { rd.payload(f.reply_into->data(), r.payload, deadline, "reply payload"); });
    return;
  }
  if (r.payload != f.reply_bytes)
    throw Error(Errc::kProtocol, who(f.server, f.h.op) + ": reply of " +
                                     std::to_string(r.payload) + " bytes, expected " +
                                     std::to_string(f.reply_bytes));
  if (f.assigned) *f.assigned = std::min(*f.assigned, r.clock);
  if (f.dest) {
    named_io(f.server, f.h.op,
             [&] { rd.payload(f.dest, r.payload, deadline, "reply payload"); });
  } else if (f.sparse_base) {
    const uint8_t* p =
        named_io(f.server, f.h.op,
                 [&] { return rd.take(r.payload, deadline, "reply payload"); });
    const size_t row = size_t(f.width) * 4;
    for (size_t i = 0; i < f.sparse_pos.size(); ++i)
      std::memcpy(f.sparse_base + f.sparse_pos[i] * size_t(f.width), p + i * row, row);
  }
}

void Worker::Impl::close_conn(int fd) {
  links.erase(fd);  // unmaps its rings, if any
  ::close(fd);
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
    std::vector<std::vector<size_t>> by_server = group_rows(layout, kd);
    // Hot rows (ps.h "Hot keys") go to a replica: (owner, replica) -> rows.
    std::map<std::pair<int, int>, std::vector<size_t>> hot_rows;
    if (!hot.empty())
      for (int s = 0; s < S; ++s) {
        std::vector<size_t> cold;
        for (size_t i : by_server[size_t(s)]) {
          const int64_t row = kd.rows[i];
          if (!hot.count({kd.key, row})) {
            cold.push_back(i);
            continue;
          }
          const int r = int((s + 1 + (opt.rank + row) % (S - 1)) % S);
          hot_rows[{s, r}].push_back(i);
        }
        by_server[size_t(s)] = std::move(cold);
      }
    auto add = [&](int server, uint16_t op, int owner, const std::vector<size_t>& pos) {
      Frame f;
      f.server = server;
      f.h = header(op, server);
      f.h.key = kd.key;
      f.h.offset = op == wire::kHotPull ? uint64_t(owner) : 0;
      f.h.count = pos.size();
      f.h.payload = f.h.count * 8;
      f.own.resize(f.h.payload);
      int64_t* ids = reinterpret_cast<int64_t*>(f.own.data());
      for (size_t i = 0; i < f.h.count; ++i) ids[i] = kd.rows[pos[i]];
      f.sparse_base = kd.data;
      f.sparse_pos = pos;
      f.width = spec.width;
      f.reply_bytes = f.h.count * uint64_t(spec.width) * 4;
      f.assigned = assigned;
      frames.push_back(std::move(f));
    };
    for (int s = 0; s < S; ++s)
      if (!by_server[size_t(s)].empty()) add(s, wire::kPull, s, by_server[size_t(s)]);
    for (const auto& [sr, pos] : hot_rows) add(sr.second, wire::kHotPull, sr.first, pos);
  }
  for (Frame& f : frames) f.h.clock = clock;
  return frames;
}

}  // namespace braid::ps
