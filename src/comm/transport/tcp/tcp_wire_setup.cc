// TCP wire: see tcp_transport.h for the connection protocol and tuning.
#include "comm/transport/tcp/tcp_transport.h"

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
#include <deque>

#include "braid/env.h"
#include "braid/error.h"
#include "braid/log.h"
#include "braid/reduce.h"
#include "comm/transport/tcp/tcp_connect.h"

namespace braid::comm {
namespace {

constexpr size_t kHdr = sizeof(MsgSig);
constexpr size_t kDirectRecvMin = 64 << 10;  // kRecv reads at least this straight into dst
// Messages of at least this many bytes are cut into one stripe per
// connection of the pair (BRAID_TCP_STREAMS); smaller ones go whole on
// connection 0.
constexpr uint64_t kStripeMin = 256 << 10;
constexpr int kDefaultStreams = 1;
// How a peer whose connection ended went (an abort shuts the sockets down).
constexpr const char* kClosedHow = "closed the connection (it exited, or its communicator failed)";
constexpr const char* kResetHow = "reset the connection (it exited, or its communicator failed)";

class TcpWire final : public Wire {
 public:
  TcpWire(const WireContext& ctx, const std::vector<int>& peers);
  ~TcpWire() override;

  void post(Request* r) override;
  bool progress() override;
  void wait_activity(std::chrono::microseconds timeout) override;
  std::string kind_to(int) const override { return "tcp"; }
  // Shuts every connection down: the peers see them close at once.
  void abort(const std::string&) override {
    for (Conn& c : conns_)
      for (Stream& st : c.st)
        if (st.fd >= 0) ::shutdown(st.fd, SHUT_RDWR);
  }
  bool busy() const override { return npending_ > 0; }
  bool poll_ready() override {
    epoll_event ev[16];
    return ::epoll_wait(epfd_, ev, 16, 0) > 0;
  }

 private:
  // One stripe of a send: payload bytes [off, off + len) of r, after a
  // copy of r's header.
  struct Tx {
    Request* r;
    uint64_t off, len;
  };
  // One connection of a pair. Each carries, in message order, a stripe of
  // every striped message and (connection 0) every small message whole:
  // the header, then the stripe's payload.
  struct Stream {
    int fd = -1;
    std::deque<Tx> tx;
    size_t tx_off = 0;  // bytes of the front stripe (header + payload) written
    MsgSig tx_hdr;
    std::unique_ptr<uint8_t[]> rx;
    size_t rpos = 0, rend = 0;
    bool rx_hdr = false;   // header of this stream's stripe of the front recv consumed
    bool rx_done = false;  // that stripe complete
    uint64_t rx_got = 0;   // its payload bytes received
    bool eof = false;
    std::string eof_how;
  };
  struct Conn {
    int rank = -1;
    std::vector<Stream> st;
    ReqQueue recvs;
  };

  int stripes(uint64_t bytes) const { return bytes >= kStripeMin ? streams_ : 1; }
  // Stripe i of n starts at a multiple of 64 bytes, so it holds whole elements.
  static uint64_t stripe_off(uint64_t bytes, int n, int i) {
    if (i <= 0) return 0;
    if (i >= n) return bytes;
    return bytes / uint64_t(n) * uint64_t(i) & ~uint64_t(63);
  }

  bool send_some(Conn& c, Stream& s);
  bool recv_some(Conn& c);
  bool recv_stripe(Conn& c, Stream& s, Request* r, uint64_t off, uint64_t len);
  bool fill(Conn& c, Stream& s);
  [[noreturn]] void fail_closed(Conn& c, const Stream& s);

  std::vector<Conn> conns_;
  std::vector<int> index_;  // rank -> index in conns_, -1 if not tcp
  int epfd_ = -1;
  int streams_ = 1;
  size_t rx_cap_ = 0;
  size_t npending_ = 0;
  uint64_t spin_ns_ = 0;
};

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

void TcpWire::post(Request* r) {
  Conn& c = conns_[size_t(index_[size_t(r->peer)])];
  if (r->kind == Request::Kind::kSend) {
    const uint64_t bytes = r->sig.bytes;
    const int n = stripes(bytes);
    for (int i = 0; i < n; ++i) {
      const uint64_t lo = stripe_off(bytes, n, i), hi = stripe_off(bytes, n, i + 1);
      c.st[size_t(i)].tx.push_back(Tx{r, lo, hi - lo});
    }
  } else {
    c.recvs.push(r);
  }
  ++npending_;
}

void TcpWire::fail_closed(Conn& c, const Stream& s) {
  const Request* r = !c.recvs.empty() ? c.recvs.front() : (!s.tx.empty() ? s.tx.front().r : nullptr);
  // A survivor whose neighbour closed after another rank died learns who
  // died from the communicator's failure record (CommImpl::forwarded).
  throw_peer_died(c.rank, r, s.eof_how);
}

bool TcpWire::send_some(Conn& c, Stream& s) {
  bool moved = false;
  while (!s.tx.empty()) {
    const Tx t = s.tx.front();
    Request* r = t.r;
    const size_t total = kHdr + t.len;
    if (s.tx_off == 0) s.tx_hdr = r->sig;
    auto* src = static_cast<uint8_t*>(const_cast<void*>(r->src)) + t.off;
    while (s.tx_off < total) {
      iovec iov[2];
      int n = 0;
      if (s.tx_off < kHdr) {
        iov[n++] = {reinterpret_cast<uint8_t*>(&s.tx_hdr) + s.tx_off, kHdr - s.tx_off};
        if (t.len) iov[n++] = {src, t.len};
      } else {
        size_t off = s.tx_off - kHdr;
        iov[n++] = {src + off, t.len - off};
      }
      msghdr m{};
      m.msg_iov = iov;
      m.msg_iovlen = size_t(n);
      ssize_t w = ::sendmsg(s.fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) return moved;
        if (errno == EINTR) continue;
        if (errno == EPIPE || errno == ECONNRESET) {
          s.eof = true;
          s.eof_how = "closed the connection";
          fail_closed(c, s);
        }
        throw_errno("tcp: send to " + describe_peer(c.rank));
      }
      const size_t before = s.tx_off > kHdr ? s.tx_off - kHdr : 0;
      s.tx_off += size_t(w);
      const size_t after = s.tx_off > kHdr ? s.tx_off - kHdr : 0;
      r->done += after - before;
      moved = true;
    }
    s.tx.pop_front();
    s.tx_off = 0;
    // The stripe that completes the payload is the last one out (every
    // stripe's header precedes its payload); a message sent whole is done
    // with its one stripe, even when empty.
    if (stripes(r->sig.bytes) == 1 || r->done == r->sig.bytes) {
      r->complete = true;
      --npending_;
    }
  }
  return moved;
}

// Reads more into the stream's receive buffer (after moving the few
// unconsumed bytes to its front). False when nothing more can be read now.
bool TcpWire::fill(Conn& c, Stream& s) {
  if (s.eof) return false;
  if (!s.rx) s.rx.reset(new uint8_t[rx_cap_]);  // on first use: large jobs touch few peers
  size_t left = s.rend - s.rpos;
  if (s.rpos > 0) {
    if (left) std::memmove(s.rx.get(), s.rx.get() + s.rpos, left);
    s.rpos = 0;
    s.rend = left;
  }
  if (s.rend == rx_cap_) return false;
  for (;;) {
    ssize_t n = ::recv(s.fd, s.rx.get() + s.rend, rx_cap_ - s.rend, MSG_DONTWAIT);
    if (n > 0) {
      s.rend += size_t(n);
      return true;
    }
    if (n == 0) {
      s.eof = true;
      s.eof_how = kClosedHow;
      return false;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
    if (errno == ECONNRESET) {
      s.eof = true;
      s.eof_how = kResetHow;
      return false;
    }
    throw_errno("tcp: recv from " + describe_peer(c.rank));
  }
}

// Moves this stream's stripe [off, off + len) of the front receive r.
// True if anything moved; s.rx_done once the stripe is complete.
bool TcpWire::recv_stripe(Conn& c, Stream& s, Request* r, uint64_t off, uint64_t len) {
  bool moved = false;
  while (!s.rx_done) {
    if (!s.rx_hdr) {
      if (s.rend - s.rpos < kHdr) {
        if (fill(c, s)) continue;
        break;
      }
      MsgSig got;
      std::memcpy(&got, s.rx.get() + s.rpos, kHdr);
      if (!sig_matches(got, r->sig)) throw_mismatch(*r, got, "tcp");
      s.rpos += kHdr;
      s.rx_hdr = true;
      moved = true;
    }
    if (s.rx_got == len) {
      s.rx_done = true;
      break;
    }
    const size_t remaining = size_t(len - s.rx_got);
    const size_t avail = s.rend - s.rpos;
    const uint64_t at = off + s.rx_got;
    uint8_t* dst = static_cast<uint8_t*>(r->dst) + at;
    if (r->kind == Request::Kind::kRecv) {
      if (avail > 0) {
        size_t n = std::min(avail, remaining);
        std::memcpy(dst, s.rx.get() + s.rpos, n);
        s.rpos += n;
        s.rx_got += n;
        r->done += n;
        moved = true;
        continue;
      }
      if (remaining >= kDirectRecvMin && !s.eof) {
        ssize_t n = ::recv(s.fd, dst, remaining, MSG_DONTWAIT);
        if (n > 0) {
          s.rx_got += size_t(n);
          r->done += size_t(n);
          moved = true;
          continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (n < 0 && errno != ECONNRESET) throw_errno("tcp: recv from " + describe_peer(c.rank));
        s.eof = true;
        s.eof_how = n == 0 ? kClosedHow : kResetHow;
        break;
      }
      if (fill(c, s)) continue;
      break;
    }
    // kRecvReduce: whole elements straight out of the receive buffer; a
    // partial element waits there for the rest of its bytes.
    const size_t esz = dtype_size(r->dtype);
    size_t n = std::min(avail, remaining) / esz * esz;
    if (n > 0 && (reinterpret_cast<uintptr_t>(s.rx.get() + s.rpos) & (esz - 1)) != 0) {
      // Odd-sized earlier messages left this payload misaligned: realign
      // (rare; the kernels want naturally aligned elements).
      std::memmove(s.rx.get(), s.rx.get() + s.rpos, avail);
      s.rpos = 0;
      s.rend = avail;
    }
    if (n > 0) {
      const uint8_t* acc = static_cast<const uint8_t*>(r->acc) + at;
      reduce2(dst, acc, s.rx.get() + s.rpos, n / esz, r->dtype, r->rop);
      s.rpos += n;
      s.rx_got += n;
      r->done += n;
      moved = true;
      continue;
    }
    if (fill(c, s)) continue;
    break;
  }
  return moved;
}

bool TcpWire::recv_some(Conn& c) {
  bool moved = false;
  while (!c.recvs.empty()) {
    Request* r = c.recvs.front();
    const uint64_t bytes = r->sig.bytes;
    const int n = stripes(bytes);
    bool all = true;
    // Connection 0 first: it carries a stripe of every message, so a
    // mismatched message is caught there even when the two sides disagree
    // on whether it is striped.
    for (int i = 0; i < n; ++i) {
      Stream& s = c.st[size_t(i)];
      if (!s.rx_done) {
        const uint64_t lo = stripe_off(bytes, n, i), hi = stripe_off(bytes, n, i + 1);
        moved |= recv_stripe(c, s, r, lo, hi - lo);
      }
      all &= s.rx_done;
    }
    if (!all) break;
    for (int i = 0; i < n; ++i) {
      Stream& s = c.st[size_t(i)];
      s.rx_hdr = s.rx_done = false;
      s.rx_got = 0;
    }
    r->complete = true;
    c.recvs.pop();
    --npending_;
    moved = true;
  }
  return moved;
}

bool TcpWire::progress() {
  if (npending_ == 0) return false;
  bool moved = false;
  for (Conn& c : conns_) {
    for (Stream& s : c.st)
      if (!s.tx.empty()) moved |= send_some(c, s);
    if (!c.recvs.empty()) {
      moved |= recv_some(c);
      // recv_some took every byte already here: a closed connection that
      // still owes part of the front message means the peer is gone. (One
      // whose stripe is complete may close early, while the others are
      // still delivering theirs.)
      if (!c.recvs.empty()) {
        const int n = stripes(c.recvs.front()->sig.bytes);
        for (int i = 0; i < n; ++i)
          if (c.st[size_t(i)].eof && !c.st[size_t(i)].rx_done) fail_closed(c, c.st[size_t(i)]);
      }
    }
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
