// TCP wire, receive path: every stream of a pair delivers its stripe of the
// front receive, through the stream's buffer (or, for a large kRecv,
// straight into the destination), reducing whole elements as they arrive.
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "braid/error.h"
#include "braid/reduce.h"
#include "comm/transport/tcp/tcp_wire.h"

namespace braid::comm::tcp {

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

// Connection 0 carries a stripe, with its header, of every message.
bool TcpWire::peek(int peer, MsgSig* next) {
  Conn& c = conns_[size_t(index_[size_t(peer)])];
  if (!c.recvs.empty()) return false;
  Stream& s = c.st[0];
  if (s.rx_hdr) return false;
  if (s.rend - s.rpos < kHdr) fill(c, s);
  if (s.rend - s.rpos < kHdr) return false;
  std::memcpy(next, s.rx.get() + s.rpos, kHdr);
  return true;
}

}  // namespace braid::comm::tcp
