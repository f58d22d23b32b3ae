// TCP wire: see tcp_transport.h for the connection protocol and tuning.
#include "comm/tcp_transport.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "braid/env.h"
#include "braid/error.h"
#include "braid/log.h"
#include "braid/reduce.h"
#include "comm/tcp_connect.h"

namespace braid::comm {
namespace {

constexpr size_t kHdr = sizeof(MsgSig);
constexpr size_t kDirectRecvMin = 64 << 10;  // kRecv reads at least this straight into dst

class TcpWire final : public Wire {
 public:
  TcpWire(const WireContext& ctx, const std::vector<int>& peers);
  ~TcpWire() override;

  void post(Request* r) override;
  bool progress() override;
  void wait_activity(std::chrono::microseconds timeout) override;
  std::string kind_to(int) const override { return "tcp"; }
  bool busy() const override { return npending_ > 0; }
  bool poll_ready() override {
    epoll_event ev[16];
    return ::epoll_wait(epfd_, ev, 16, 0) > 0;
  }

 private:
  struct Conn {
    int rank = -1;
    int fd = -1;
    ReqQueue sends, recvs;
    size_t tx_off = 0;  // bytes of the front send (header + payload) written
    MsgSig tx_hdr;
    std::unique_ptr<uint8_t[]> rx;
    size_t rpos = 0, rend = 0;
    bool rx_hdr = false;  // header of the front recv consumed
    bool eof = false;
    std::string eof_how;
  };

  bool send_some(Conn& c);
  bool recv_some(Conn& c);
  bool fill(Conn& c);
  [[noreturn]] void fail_closed(Conn& c);

  std::vector<Conn> conns_;
  std::vector<int> index_;  // rank -> index in conns_, -1 if not tcp
  int epfd_ = -1;
  size_t rx_cap_ = 0;
  size_t npending_ = 0;
  uint64_t spin_ns_ = 0;
};

TcpWire::TcpWire(const WireContext& ctx, const std::vector<int>& peers) : Wire(ctx) {
  const int buf_bytes = int(std::clamp<int64_t>(env_int("BRAID_TCP_BUF_BYTES", 0), 0, 1 << 30));
  rx_cap_ = size_t(std::clamp<int64_t>(env_int("BRAID_TCP_RXBUF_BYTES", 256 << 10), 4096, int64_t(64) << 20));
  int local = 0;  // ranks on this host, whatever wire reaches them
  for (const PeerInfo& pi : ctx.peers) local += pi.host_id == ctx.peers[size_t(ctx.rank)].host_id;
  spin_ns_ = spin_ns_for(local);
  index_.assign(size_t(ctx.size), -1);
  conns_.resize(peers.size());
  bool all_local = true;
  for (size_t i = 0; i < peers.size(); ++i) {
    index_[size_t(peers[i])] = int(i);
    conns_[i].rank = peers[i];
    if (ctx.peers[size_t(peers[i])].host_id != ctx.peers[size_t(ctx.rank)].host_id) all_local = false;
  }

  // Listen, publish, connect to the lower ranks, accept the higher ones.
  std::vector<int> fds(size_t(ctx.size), -1);
  int lfd = tcp_listen(ctx, all_local, buf_bytes);
  try {
    std::vector<int> higher;
    for (int q : peers) {
      if (q < ctx.rank) fds[size_t(q)] = tcp_connect(ctx, q, buf_bytes);
      else higher.push_back(q);
    }
    if (!higher.empty()) tcp_accept(ctx, lfd, higher, fds);
  } catch (...) {
    ::close(lfd);
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
    throw;
  }
  ::close(lfd);
  for (Conn& c : conns_) c.fd = fds[size_t(c.rank)];
  int one = 1;

  epfd_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (epfd_ < 0) throw_errno("tcp: epoll_create1");
  for (Conn& c : conns_) {
    ::setsockopt(c.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    ::fcntl(c.fd, F_SETFL, ::fcntl(c.fd, F_GETFL) | O_NONBLOCK);
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
    ev.data.fd = c.fd;
    if (::epoll_ctl(epfd_, EPOLL_CTL_ADD, c.fd, &ev) != 0) throw_errno("tcp: epoll_ctl");
  }
}

TcpWire::~TcpWire() {
  for (Conn& c : conns_)
    if (c.fd >= 0) ::close(c.fd);
  if (epfd_ >= 0) ::close(epfd_);
}


void TcpWire::post(Request* r) {
  Conn& c = conns_[size_t(index_[size_t(r->peer)])];
  (r->kind == Request::Kind::kSend ? c.sends : c.recvs).push(r);
  ++npending_;
}

void TcpWire::fail_closed(Conn& c) {
  const Request* r = !c.recvs.empty() ? c.recvs.front() : (!c.sends.empty() ? c.sends.front() : nullptr);
  throw_peer_died(c.rank, r, c.eof_how);
}

bool TcpWire::send_some(Conn& c) {
  bool moved = false;
  while (!c.sends.empty()) {
    Request* r = c.sends.front();
    const size_t total = kHdr + r->sig.bytes;
    if (c.tx_off == 0) c.tx_hdr = r->sig;
    while (c.tx_off < total) {
      iovec iov[2];
      int n = 0;
      if (c.tx_off < kHdr) {
        iov[n++] = {reinterpret_cast<uint8_t*>(&c.tx_hdr) + c.tx_off, kHdr - c.tx_off};
        if (r->sig.bytes) iov[n++] = {const_cast<void*>(r->src), r->sig.bytes};
      } else {
        size_t off = c.tx_off - kHdr;
        iov[n++] = {static_cast<uint8_t*>(const_cast<void*>(r->src)) + off, r->sig.bytes - off};
      }
      msghdr m{};
      m.msg_iov = iov;
      m.msg_iovlen = size_t(n);
      ssize_t w = ::sendmsg(c.fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) return moved;
        if (errno == EINTR) continue;
        if (errno == EPIPE || errno == ECONNRESET) {
          c.eof = true;
          c.eof_how = "closed the connection";
          fail_closed(c);
        }
        throw_errno("tcp: send to " + describe_peer(c.rank));
      }
      c.tx_off += size_t(w);
      r->done = c.tx_off > kHdr ? c.tx_off - kHdr : 0;
      moved = true;
    }
    r->complete = true;
    c.sends.pop();
    c.tx_off = 0;
    --npending_;
  }
  return moved;
}

// Reads more into the receive buffer (after moving the few unconsumed bytes
// to its front). False when nothing more can be read now.
bool TcpWire::fill(Conn& c) {
  if (c.eof) return false;
  if (!c.rx) c.rx.reset(new uint8_t[rx_cap_]);  // on first use: large jobs touch few peers
  size_t left = c.rend - c.rpos;
  if (c.rpos > 0) {
    if (left) std::memmove(c.rx.get(), c.rx.get() + c.rpos, left);
    c.rpos = 0;
    c.rend = left;
  }
  if (c.rend == rx_cap_) return false;
  for (;;) {
    ssize_t n = ::recv(c.fd, c.rx.get() + c.rend, rx_cap_ - c.rend, MSG_DONTWAIT);
    if (n > 0) {
      c.rend += size_t(n);
      return true;
    }
    if (n == 0) {
      c.eof = true;
      c.eof_how = "closed the connection (process exited?)";
      return false;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
    if (errno == ECONNRESET) {
      c.eof = true;
      c.eof_how = "reset the connection (process exited?)";
      return false;
    }
    throw_errno("tcp: recv from " + describe_peer(c.rank));
  }
}

bool TcpWire::recv_some(Conn& c) {
  bool moved = false;
  while (!c.recvs.empty()) {
    Request* r = c.recvs.front();
    const uint64_t bytes = r->sig.bytes;
    if (!c.rx_hdr) {
      if (c.rend - c.rpos < kHdr) {
        if (fill(c)) continue;
        break;
      }
      MsgSig got;
      std::memcpy(&got, c.rx.get() + c.rpos, kHdr);
      if (!sig_matches(got, r->sig)) throw_mismatch(*r, got, "tcp");
      c.rpos += kHdr;
      c.rx_hdr = true;
      moved = true;
    }
    if (r->done == bytes) {
      r->complete = true;
      c.recvs.pop();
      c.rx_hdr = false;
      --npending_;
      continue;
    }
    const size_t remaining = size_t(bytes - r->done);
    const size_t avail = c.rend - c.rpos;
    uint8_t* dst = static_cast<uint8_t*>(r->dst) + r->done;
    if (r->kind == Request::Kind::kRecv) {
      if (avail > 0) {
        size_t n = std::min(avail, remaining);
        std::memcpy(dst, c.rx.get() + c.rpos, n);
        c.rpos += n;
        r->done += n;
        moved = true;
        continue;
      }
      if (remaining >= kDirectRecvMin && !c.eof) {
        ssize_t n = ::recv(c.fd, dst, remaining, MSG_DONTWAIT);
        if (n > 0) {
          r->done += size_t(n);
          moved = true;
          continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (n < 0 && errno != ECONNRESET) throw_errno("tcp: recv from " + describe_peer(c.rank));
        c.eof = true;
        c.eof_how = n == 0 ? "closed the connection (process exited?)" : "reset the connection (process exited?)";
        break;
      }
      if (fill(c)) continue;
      break;
    }
    // kRecvReduce: whole elements straight out of the receive buffer; a
    // partial element waits there for the rest of its bytes.
    const size_t esz = dtype_size(r->dtype);
    size_t n = std::min(avail, remaining) / esz * esz;
    if (n > 0 && (reinterpret_cast<uintptr_t>(c.rx.get() + c.rpos) & (esz - 1)) != 0) {
      // Odd-sized earlier messages left this payload misaligned: realign
      // (rare; the kernels want naturally aligned elements).
      std::memmove(c.rx.get(), c.rx.get() + c.rpos, avail);
      c.rpos = 0;
      c.rend = avail;
    }
    if (n > 0) {
      const uint8_t* acc = static_cast<const uint8_t*>(r->acc) + r->done;
      reduce2(dst, acc, c.rx.get() + c.rpos, n / esz, r->dtype, r->rop);
      c.rpos += n;
      r->done += n;
      moved = true;
      continue;
    }
    if (fill(c)) continue;
    break;
  }
  return moved;
}

bool TcpWire::progress() {
  if (npending_ == 0) return false;
  bool moved = false;
  for (Conn& c : conns_) {
    if (c.sends.empty() && c.recvs.empty()) continue;
    if (!c.sends.empty()) moved |= send_some(c);
    if (!c.recvs.empty()) moved |= recv_some(c);
    if (c.eof && !c.recvs.empty()) fail_closed(c);
  }
  return moved;
}

void TcpWire::wait_activity(std::chrono::microseconds timeout) {
  epoll_event ev[16];
  const uint64_t t0 = now_ns();
  const uint64_t tmo = uint64_t(std::max<int64_t>(timeout.count(), 0)) * 1000;
  const uint64_t spin_end = t0 + std::min(spin_ns_, tmo);
  do {
    if (::epoll_wait(epfd_, ev, 16, 0) > 0) return;
  } while (now_ns() < spin_end);
  uint64_t now = now_ns();
  if (now >= t0 + tmo) return;
  uint64_t left = t0 + tmo - now;
  timespec ts{time_t(left / 1'000'000'000), long(left % 1'000'000'000)};
  ::epoll_pwait2(epfd_, ev, 16, &ts, nullptr);
}

}  // namespace

std::unique_ptr<Wire> make_tcp_wire(const WireContext& ctx, const std::vector<int>& peers) {
  return std::make_unique<TcpWire>(ctx, peers);
}

}  // namespace braid::comm
