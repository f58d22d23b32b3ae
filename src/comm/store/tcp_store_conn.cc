// The store server's connections: reading a client's frames (lengths
// checked before anything is buffered), handing each request to the store
// state, and queueing and flushing its responses.
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "braid/log.h"
#include "comm/store/tcp_store_server.h"

namespace braid {

using namespace comm::store_wire;
using namespace store_server;

void TcpStoreServer::Impl::drop(uint64_t id, const std::string& why) {
  auto it = conns.find(id);
  if (it == conns.end()) return;
  Conn& c = it->second;
  if (!why.empty()) BRAID_LOG(kWarn, "store server: dropped client " << c.peer << ": " << why);
  state.forget_conn(id);
  ::epoll_ctl(epfd, EPOLL_CTL_DEL, c.fd, nullptr);
  ::close(c.fd);
  conns.erase(it);
}

// Queues a response and tries to send it at once. Returns false if the
// connection was dropped.
bool TcpStoreServer::Impl::respond(uint64_t id, uint64_t req, Status st, const std::vector<uint8_t>& payload) {
  auto it = conns.find(id);
  if (it == conns.end()) return false;
  Conn& c = it->second;
  std::vector<uint8_t> f = begin_frame();
  put_u64(f, req);
  f.push_back(uint8_t(st));
  f.insert(f.end(), payload.begin(), payload.end());
  finish_frame(f);
  if (c.out.size() - c.out_off + f.size() > kMaxPendingOutput) {
    drop(id, "not reading its responses (over 1 GiB queued)");
    return false;
  }
  c.out.insert(c.out.end(), f.begin(), f.end());
  return flush(id);
}

bool TcpStoreServer::Impl::flush(uint64_t id) {
  Conn& c = conns.at(id);
  while (c.out_off < c.out.size()) {
    ssize_t w = ::send(c.fd, c.out.data() + c.out_off, c.out.size() - c.out_off, MSG_NOSIGNAL);
    if (w > 0) {
      c.out_off += size_t(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    drop(id, std::string("send failed: ") + std::strerror(errno));
    return false;
  }
  if (c.out_off == c.out.size()) {
    c.out.clear();
    c.out_off = 0;
  } else if (c.out_off > (size_t(1) << 20)) {
    c.out.erase(c.out.begin(), c.out.begin() + ptrdiff_t(c.out_off));
    c.out_off = 0;
  }
  bool want = c.out_off < c.out.size();
  if (want != c.want_out) {
    epoll_event ev{};
    ev.events = uint32_t(EPOLLIN) | (want ? uint32_t(EPOLLOUT) : 0u);
    ev.data.u64 = id;
    ::epoll_ctl(epfd, EPOLL_CTL_MOD, c.fd, &ev);
    c.want_out = want;
  }
  return true;
}

void TcpStoreServer::Impl::on_readable(uint64_t id) {
  Conn& c = conns.at(id);
  size_t old = c.in.size();
  c.in.resize(old + kReadSlice);
  ssize_t r;
  do {
    r = ::recv(c.fd, c.in.data() + old, kReadSlice, 0);
  } while (r < 0 && errno == EINTR);
  if (r <= 0) {
    c.in.resize(old);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    // A client going away is normal; not worth a warning.
    drop(id, "");
    return;
  }
  c.in.resize(old + size_t(r));
  // Parse every whole frame in the buffer.
  for (;;) {
    auto cit = conns.find(id);
    if (cit == conns.end()) return;
    Conn& cc = cit->second;
    uint32_t len = 0;
    Cut cut = cut_frame(cc.in.data() + cc.in_off, cc.in.size() - cc.in_off, kMaxRequestBody, &len);
    if (cut == Cut::kBad) {
      drop(id, "frame length " + std::to_string(len) + " out of range [" + std::to_string(kMinBody) +
                   ", " + std::to_string(kMaxRequestBody) + "]");
      return;
    }
    if (cut == Cut::kPartial) break;
    const uint8_t* body = cc.in.data() + cc.in_off + 4;
    cc.in_off += 4 + size_t(len);
    // handle() may drop the connection (and free `body`'s buffer) only
    // after it is done reading from it.
    std::string bad = state.handle(id, body, len);
    if (!bad.empty()) {
      drop(id, bad);
      return;
    }
    if (!conns.count(id)) return;
  }
  Conn& cc = conns.at(id);
  if (cc.in_off == cc.in.size()) {
    cc.in.clear();
    cc.in_off = 0;
  } else if (cc.in_off > 0) {
    cc.in.erase(cc.in.begin(), cc.in.begin() + ptrdiff_t(cc.in_off));
    cc.in_off = 0;
  }
}

}  // namespace braid
