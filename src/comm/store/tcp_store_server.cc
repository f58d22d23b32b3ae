// TcpStoreServer: one event-loop thread (epoll) serving every client; the
// shape and its reasons are in tcp_store_server.h.
#include "comm/store/tcp_store_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "braid/error.h"
#include "braid/log.h"

namespace braid {

using namespace store_server;

namespace {

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

void TcpStoreServer::Impl::wake() {
  char c = 1;
  (void)!::write(wake_w, &c, 1);
}

void TcpStoreServer::Impl::loop() {
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

}  // namespace braid
