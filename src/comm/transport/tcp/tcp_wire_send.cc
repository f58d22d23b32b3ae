// TCP wire, send path: each stream writes its queue of stripes, a header
// and then the stripe's payload, with one sendmsg per attempt.
#include <sys/uio.h>

#include <cerrno>

#include "braid/error.h"
#include "comm/transport/tcp/tcp_wire.h"

namespace braid::comm::tcp {

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

}  // namespace braid::comm::tcp
