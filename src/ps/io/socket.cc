// Listening, connecting and waiting on the parameter server's sockets.
#include "ps/io/socket.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "braid/env.h"
#include "braid/error.h"
#include "comm/store/auth.h"

namespace braid::ps {

namespace {
sockaddr_in resolve(const std::string& host, int port) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || !res)
    throw Error(Errc::kIo, "cannot resolve parameter-server host '" + host +
                               "': " + ::gai_strerror(rc));
  sockaddr_in a{};
  std::memcpy(&a, res->ai_addr, sizeof a);
  ::freeaddrinfo(res);
  a.sin_port = htons(uint16_t(port));
  return a;
}

void tune(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  // A peer whose host vanishes closes nothing. Keepalive probes after 5 s
  // idle, one a second, 5 unanswered: the connection fails in about 10 s,
  // as TCP_USER_TIMEOUT makes it with data unacknowledged for 10 s; a
  // live peer's kernel answers probes however long its process waits.
  int idle = 5, intvl = 1, cnt = 5;
  unsigned user_timeout_ms = 10000;
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
  ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof user_timeout_ms);
}
}  // namespace

int accept_tcp(int listen_fd) {
  int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd >= 0) tune(fd);
  return fd;
}

int listen_tcp(const std::string& host, int* port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw_errno("parameter server: socket");
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a = resolve(host, 0);
  // The kernel's largest accept queue: with a short one, a flood of
  // connections overflows it, and a connection the kernel then leaves half
  // open is neither served nor refused until its retransmissions end.
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, SOMAXCONN) != 0) {
    int e = errno;
    ::close(fd);
    errno = e;
    throw_errno("parameter server: bind/listen on " + host);
  }
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

int connect_tcp(const std::string& host, int port, std::chrono::milliseconds timeout,
                const std::string& what) {
  const sockaddr_in a = resolve(host, port);
  const int64_t deadline = int64_t(now_ns()) + int64_t(timeout.count()) * 1000000;
  for (int delay_ms = 5;; delay_ms = std::min(delay_ms * 2, 200)) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) throw_errno(what + ": socket");
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0) {
      tune(fd);
      return fd;
    }
    int e = errno;
    ::close(fd);
    if (e != ECONNREFUSED && e != EINTR && e != EAGAIN && e != ETIMEDOUT) {
      errno = e;
      throw_errno(what + ": connect to " + host + ":" + std::to_string(port));
    }
    if (int64_t(now_ns()) >= deadline)
      throw Error(Errc::kTimeout, what + ": no server listening at " + host + ":" +
                                      std::to_string(port) + " within " +
                                      std::to_string(timeout.count()) + " ms");
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
  }
}

int connect_authenticated(const std::string& host, int port, const std::string& secret,
                          std::chrono::milliseconds timeout, const std::string& what) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    int fd = connect_tcp(host, port, std::max(left, std::chrono::milliseconds(1)), what);
    try {
      comm::authenticate_connect(fd, secret, std::max(left, std::chrono::milliseconds(1)));
      return fd;
    } catch (const Error& e) {
      ::close(fd);
      if (e.code() != Errc::kPeerDied || std::chrono::steady_clock::now() >= until) throw;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void set_recv_timeout(int fd, int ms) {
  timeval tv{ms / 1000, (ms % 1000) * 1000};
  if (::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0)
    throw_errno("parameter server: SO_RCVTIMEO");
}

bool wait_readable(int fd, int ms) {
  pollfd p{fd, POLLIN, 0};
  int rc = ::poll(&p, 1, ms);
  return rc > 0;
}

}  // namespace braid::ps
