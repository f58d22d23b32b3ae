// The store server's handshakes: every fresh connection proves the job
// secret on its own short-lived thread (auth.h), and only then joins the
// event loop, so a stalled client never holds the loop up.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "braid/log.h"
#include "comm/store/auth.h"
#include "comm/store/tcp_store_server.h"

namespace braid {

using namespace store_server;

namespace {

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

}  // namespace

void TcpStoreServer::Impl::start_handshake(int fd, std::string peer) {
  std::lock_guard<std::mutex> l(hs_mu);
  reap_handshakes_locked();
  if (handshakes.size() >= kMaxHandshakes) {
    uint64_t more = 0;
    if (stranger_log.allow(&more))
      BRAID_LOG(kWarn, "store server: dropped connection from " << peer << ": more than "
                                                                << kMaxHandshakes
                                                                << " handshakes in progress"
                                                                << LogLimiter::note(more));
    ::close(fd);
    return;
  }
  handshakes.emplace_back();
  Handshake* h = &handshakes.back();
  h->fd = fd;
  h->peer = std::move(peer);
  h->thread = std::thread([this, h] { run_handshake(h); });
}

void TcpStoreServer::Impl::run_handshake(Handshake* h) {
  bool ok = false;
  try {
    comm::authenticate_accept(h->fd, secret, kHandshakeTimeout);
    ok = true;
  } catch (const std::exception& e) {
    uint64_t more = 0;
    if (!stopping.load() && stranger_log.allow(&more))
      BRAID_LOG(kWarn, "store server: dropped connection from " << h->peer
                                                                << " (handshake failed): "
                                                                << e.what() << LogLimiter::note(more));
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

void TcpStoreServer::Impl::reap_handshakes_locked() {
  for (auto it = handshakes.begin(); it != handshakes.end();) {
    if (it->finished) {
      it->thread.join();  // it has nothing left to do but return
      it = handshakes.erase(it);
    } else {
      ++it;
    }
  }
}

void TcpStoreServer::Impl::adopt_authenticated() {
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

void TcpStoreServer::Impl::accept_all() {
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

}  // namespace braid
