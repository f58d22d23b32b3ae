// TcpStoreServer: one event-loop thread (epoll) serving every client.
//
// Why the shape:
//  * The job-secret handshake is a blocking exchange (comm/auth.h), so each
//    fresh connection runs it on its own short-lived thread with a deadline;
//    a client that stalls mid-handshake ties up only that thread, never the
//    loop. Only authenticated sockets reach the loop.
//  * get/wait park on the server (comm/tcp_store_state.h keeps a waiter per
//    request, indexed by key and by deadline) and are answered when the last
//    key arrives or the deadline passes, so clients never poll.
//  * Each read takes a bounded slice from one client and frame lengths are
//    checked before buffering, so one misbehaving client (garbage, oversized
//    lengths, a flood) is dropped without starving the others.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/rand.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <list>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "braid/env.h"
#include "braid/error.h"
#include "braid/log.h"
#include "braid/store.h"
#include "comm/store/auth.h"
#include "comm/store/tcp_store_state.h"
#include "comm/store/tcp_store_wire.h"

namespace braid {

using namespace comm::store_wire;

namespace {

constexpr auto kHandshakeTimeout = std::chrono::seconds(10);
constexpr size_t kMaxHandshakes = 256;         // concurrent, unauthenticated
constexpr size_t kMaxPendingOutput = size_t(1) << 30;
constexpr size_t kReadSlice = 256 * 1024;
constexpr uint64_t kListenId = 0;
constexpr uint64_t kWakeId = ~uint64_t(0);

std::string peer_name(const sockaddr_storage& ss) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (ss.ss_family == AF_INET) {
    auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    port = ntohs(a->sin6_port);
  }
  return std::string(host) + ":" + std::to_string(port);
}

int open_listener(const std::string& bind_host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  const char* node = nullptr;
  if (!bind_host.empty() && bind_host != "*" && bind_host != "0.0.0.0") node = bind_host.c_str();
  if (!node) hints.ai_family = AF_INET;
  addrinfo* res = nullptr;
  std::string service = std::to_string(port);
  int rc = ::getaddrinfo(node, service.c_str(), &hints, &res);
  if (rc != 0)
    throw Error(Errc::kIo, "store server: cannot resolve bind address '" + bind_host +
                               "': " + gai_strerror(rc));
  std::string last_err = "no address";
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, 1024) == 0) {
      ::freeaddrinfo(res);
      return fd;
    }
    last_err = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(res);
  throw Error(Errc::kIo, "store server: cannot listen on " + (node ? bind_host : "*") + ":" +
                             std::to_string(port) + ": " + last_err);
}

}  // namespace

struct TcpStoreServer::Impl {
  std::string secret;
  int listen_fd = -1;
  int epfd = -1;
  int wake_r = -1, wake_w = -1;
  int port = 0;
  std::atomic<bool> stopping{false};
  std::thread loop_thread;

  // Handshakes: shared between the loop and the handshake threads.
  struct Handshake {
    int fd = -1;  // -1 once closed or handed to the loop
    std::string peer;
    bool finished = false;
    std::thread thread;
  };
  std::mutex hs_mu;
  std::list<Handshake> handshakes;
  std::vector<std::pair<int, std::string>> authenticated;

  // Everything below is touched only by the loop thread.
  struct Conn {
    int fd = -1;
    std::string peer;
    std::vector<uint8_t> in;
    size_t in_off = 0;
    std::vector<uint8_t> out;
    size_t out_off = 0;
    bool want_out = false;
  };
  std::unordered_map<uint64_t, Conn> conns;
  uint64_t next_conn = 1;
  comm::StoreState state{[this](uint64_t conn, uint64_t req, Status st, const Bytes& payload) {
    respond(conn, req, st, payload);
  }};

  void wake() {
    char c = 1;
    (void)!::write(wake_w, &c, 1);
  }

  // ---- handshakes (own threads) -------------------------------------------

  void start_handshake(int fd, std::string peer) {
    std::lock_guard<std::mutex> l(hs_mu);
    reap_handshakes_locked();
    if (handshakes.size() >= kMaxHandshakes) {
      BRAID_LOG(kWarn, "store server: dropped connection from " << peer << ": more than "
                                                                << kMaxHandshakes
                                                                << " handshakes in progress");
      ::close(fd);
      return;
    }
    handshakes.emplace_back();
    Handshake* h = &handshakes.back();
    h->fd = fd;
    h->peer = std::move(peer);
    h->thread = std::thread([this, h] { run_handshake(h); });
  }

  void run_handshake(Handshake* h) {
    bool ok = false;
    try {
      comm::authenticate_accept(h->fd, secret, kHandshakeTimeout);
      ok = true;
    } catch (const std::exception& e) {
      if (!stopping.load())
        BRAID_LOG(kWarn, "store server: dropped connection from " << h->peer
                                                                  << " (handshake failed): "
                                                                  << e.what());
    }
    std::lock_guard<std::mutex> l(hs_mu);
    if (ok && !stopping.load()) {
      authenticated.emplace_back(h->fd, h->peer);
      wake();
    } else {
      ::close(h->fd);
    }
    h->fd = -1;
    h->finished = true;
  }

  void reap_handshakes_locked() {
    for (auto it = handshakes.begin(); it != handshakes.end();) {
      if (it->finished) {
        it->thread.join();  // it has nothing left to do but return
        it = handshakes.erase(it);
      } else {
        ++it;
      }
    }
  }

  // ---- connections --------------------------------------------------------

  void adopt_authenticated() {
    std::vector<std::pair<int, std::string>> fresh;
    {
      std::lock_guard<std::mutex> l(hs_mu);
      fresh.swap(authenticated);
      reap_handshakes_locked();
    }
    for (auto& [fd, peer] : fresh) {
      uint64_t id = next_conn++;
      Conn& c = conns[id];
      c.fd = fd;
      c.peer = peer;
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = id;
      if (::epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        BRAID_LOG(kWarn, "store server: epoll_ctl failed for " << peer << ": "
                                                              << std::strerror(errno));
        ::close(fd);
        conns.erase(id);
      }
    }
  }

  void accept_all() {
    for (;;) {
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
          BRAID_LOG(kWarn, "store server: accept: " << std::strerror(errno));
        return;
      }
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      start_handshake(fd, peer_name(ss));
    }
  }

  void drop(uint64_t id, const std::string& why) {
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
  bool respond(uint64_t id, uint64_t req, Status st, const std::vector<uint8_t>& payload) {
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

  bool flush(uint64_t id) {
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

  void on_readable(uint64_t id) {
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
      size_t avail = cc.in.size() - cc.in_off;
      if (avail < 4) break;
      uint32_t len = get_u32(cc.in.data() + cc.in_off);
      if (len < 9 || len > kMaxRequestBody) {
        drop(id, "frame length " + std::to_string(len) + " out of range [9, " +
                     std::to_string(kMaxRequestBody) + "]");
        return;
      }
      if (avail < 4 + size_t(len)) break;
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

  void loop() {
    std::vector<epoll_event> evs(256);
    while (!stopping.load()) {
      int n = ::epoll_wait(epfd, evs.data(), int(evs.size()), state.next_timeout_ms());
      if (n < 0) {
        if (errno == EINTR) continue;
        BRAID_LOG(kError, "store server: epoll_wait: " << std::strerror(errno));
        break;
      }
      for (int i = 0; i < n; ++i) {
        uint64_t id = evs[size_t(i)].data.u64;
        uint32_t e = evs[size_t(i)].events;
        if (id == kListenId) {
          accept_all();
        } else if (id == kWakeId) {
          char buf[256];
          while (::read(wake_r, buf, sizeof buf) > 0) {
          }
          adopt_authenticated();
        } else {
          if (!conns.count(id)) continue;
          // Whatever goes wrong while serving one client (even running out
          // of memory) costs that client its connection, not the server.
          try {
            if (e & EPOLLOUT) {
              if (!flush(id)) continue;
            }
            if (e & (EPOLLIN | EPOLLHUP | EPOLLERR)) on_readable(id);
          } catch (const std::exception& ex) {
            drop(id, std::string("internal error while serving it: ") + ex.what());
          }
        }
      }
      try {
        state.expire();
      } catch (const std::exception& ex) {
        BRAID_LOG(kError, "store server: while expiring waiters: " << ex.what());
      }
    }
  }
};

TcpStoreServer::TcpStoreServer(const std::string& bind_host, int port, const std::string& secret)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.secret = secret;
  s.listen_fd = open_listener(bind_host, port);
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  ::getsockname(s.listen_fd, reinterpret_cast<sockaddr*>(&ss), &len);
  s.port = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                    : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  int p[2];
  if (::pipe2(p, O_NONBLOCK | O_CLOEXEC) != 0) {
    ::close(s.listen_fd);
    throw_errno("store server: pipe");
  }
  s.wake_r = p[0];
  s.wake_w = p[1];
  s.epfd = ::epoll_create1(EPOLL_CLOEXEC);
  if (s.epfd < 0) {
    ::close(s.listen_fd);
    ::close(s.wake_r);
    ::close(s.wake_w);
    throw_errno("store server: epoll_create1");
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kListenId;
  ::epoll_ctl(s.epfd, EPOLL_CTL_ADD, s.listen_fd, &ev);
  ev.data.u64 = kWakeId;
  ::epoll_ctl(s.epfd, EPOLL_CTL_ADD, s.wake_r, &ev);
  s.loop_thread = std::thread([&s] { s.loop(); });
}

TcpStoreServer::~TcpStoreServer() {
  Impl& s = *impl_;
  s.stopping.store(true);
  s.wake();
  s.loop_thread.join();
  {
    // Unblock handshakes still in progress; each closes its own socket.
    std::lock_guard<std::mutex> l(s.hs_mu);
    for (auto& h : s.handshakes)
      if (h.fd >= 0) ::shutdown(h.fd, SHUT_RDWR);
  }
  for (auto& h : s.handshakes) h.thread.join();
  for (auto& [fd, peer] : s.authenticated) ::close(fd);
  for (auto& [id, c] : s.conns) ::close(c.fd);
  ::close(s.listen_fd);
  ::close(s.epfd);
  ::close(s.wake_r);
  ::close(s.wake_w);
}

int TcpStoreServer::port() const { return impl_->port; }

std::string make_job_secret() {
  uint8_t raw[32];
  if (RAND_bytes(raw, sizeof raw) != 1)
    throw Error(Errc::kInternal, "make_job_secret: RAND_bytes failed");
  static const char* d = "0123456789abcdef";
  std::string s;
  for (uint8_t b : raw) {
    s.push_back(d[b >> 4]);
    s.push_back(d[b & 15]);
  }
  return s;
}

}  // namespace braid
