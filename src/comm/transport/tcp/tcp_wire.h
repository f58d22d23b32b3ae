// TcpWire, the TCP wire: one class whose definitions are split by concern
// over tcp_wire_setup.cc (connections), tcp_wire_send.cc, tcp_wire_recv.cc
// and tcp_wire_progress.cc. Private to those files; tcp_transport.h
// describes the protocol and its tuning.
#pragma once

#include <sys/epoll.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "comm/transport/wire.h"

namespace braid::comm::tcp {

constexpr size_t kHdr = sizeof(MsgSig);
constexpr size_t kDirectRecvMin = 64 << 10;  // kRecv reads at least this straight into dst
// Messages of at least this many bytes are cut into one stripe per
// connection of the pair (BRAID_TCP_STREAMS); smaller ones go whole on
// connection 0.
constexpr uint64_t kStripeMin = 256 << 10;
constexpr int kDefaultStreams = 1;
// How a peer whose connection ended went (an abort shuts the sockets down).
inline constexpr const char* kClosedHow = "closed the connection (it exited, or its communicator failed)";
inline constexpr const char* kResetHow = "reset the connection (it exited, or its communicator failed)";

class TcpWire final : public Wire {
 public:
  TcpWire(const WireContext& ctx, const std::vector<int>& peers);
  ~TcpWire() override;

  void post(Request* r) override;
  bool progress() override;
  bool peek(int peer, MsgSig* next) override;
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

}  // namespace braid::comm::tcp
