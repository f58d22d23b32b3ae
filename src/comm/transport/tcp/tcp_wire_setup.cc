// TCP wire, set-up: the pair's connections (tcp_connect.h authenticates
// them), socket options and the epoll set; tcp_transport.h describes the
// protocol.
#include "comm/transport/tcp/tcp_transport.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include <algorithm>

#include "braid/env.h"
#include "braid/error.h"
#include "comm/transport/tcp/tcp_connect.h"
#include "comm/transport/tcp/tcp_wire.h"

namespace braid::comm {
namespace tcp {

TcpWire::TcpWire(const WireContext& ctx, const std::vector<int>& peers) : Wire(ctx) {
  const int buf_bytes = int(std::clamp<int64_t>(env_int("BRAID_TCP_BUF_BYTES", 0), 0, 1 << 30));
  rx_cap_ = size_t(std::clamp<int64_t>(env_int("BRAID_TCP_RXBUF_BYTES", 256 << 10), 4096, int64_t(64) << 20));
  streams_ = int(std::clamp<int64_t>(env_int("BRAID_TCP_STREAMS", kDefaultStreams), 1, 16));
  int local = 0;  // ranks on this host, whatever wire reaches them
  for (const PeerInfo& pi : ctx.peers) local += pi.host_id == ctx.peers[size_t(ctx.rank)].host_id;
  spin_ns_ = spin_ns_for(local, ctx.host_cores);
  index_.assign(size_t(ctx.size), -1);
  conns_.resize(peers.size());
  bool all_local = true;
  for (size_t i = 0; i < peers.size(); ++i) {
    index_[size_t(peers[i])] = int(i);
    conns_[i].rank = peers[i];
    conns_[i].st.resize(size_t(streams_));
    if (ctx.peers[size_t(peers[i])].host_id != ctx.peers[size_t(ctx.rank)].host_id) all_local = false;
  }

  // Listen, publish, connect to the lower ranks, accept the higher ones.
  const size_t K = size_t(streams_);
  std::vector<int> fds(size_t(ctx.size) * K, -1);
  int lfd = tcp_listen(ctx, all_local, buf_bytes, streams_);
  try {
    std::vector<int> higher;
    for (int q : peers) {
      if (q < ctx.rank) {
        std::vector<int> mine = tcp_connect(ctx, q, buf_bytes, streams_);
        std::copy(mine.begin(), mine.end(), fds.begin() + std::ptrdiff_t(size_t(q) * K));
      } else {
        higher.push_back(q);
      }
    }
    if (!higher.empty()) tcp_accept(ctx, lfd, higher, fds, streams_);
  } catch (...) {
    ::close(lfd);
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
    throw;
  }
  ::close(lfd);
  for (Conn& c : conns_)
    for (size_t k = 0; k < K; ++k) c.st[k].fd = fds[size_t(c.rank) * K + k];
  int one = 1;

  epfd_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (epfd_ < 0) throw_errno("tcp: epoll_create1");
  for (Conn& c : conns_) {
    for (Stream& st : c.st) {
      ::setsockopt(st.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      ::fcntl(st.fd, F_SETFL, ::fcntl(st.fd, F_GETFL) | O_NONBLOCK);
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
      ev.data.fd = st.fd;
      if (::epoll_ctl(epfd_, EPOLL_CTL_ADD, st.fd, &ev) != 0) throw_errno("tcp: epoll_ctl");
    }
  }
}

TcpWire::~TcpWire() {
  for (Conn& c : conns_)
    for (Stream& st : c.st)
      if (st.fd >= 0) ::close(st.fd);
  if (epfd_ >= 0) ::close(epfd_);
}

}  // namespace tcp

std::unique_ptr<Wire> make_tcp_wire(const WireContext& ctx, const std::vector<int>& peers) {
  return std::make_unique<tcp::TcpWire>(ctx, peers);
}

}  // namespace braid::comm
