// Set-up of the TCP wire's connections (used by tcp_wire_setup.cc).
//
// Each rank listens on one socket and publishes "tcp/addr/<rank>" = "ip port"
// in the store; the higher rank of a pair connects to the lower one. A new
// connection first proves the job secret (authenticate_connect/accept), then
// the connector sends a fixed-size hello (magic, rank, size, connection
// index, communicator token) and the acceptor answers with its own rank.
// Each pair opens BRAID_TCP_STREAMS connections (tcp_transport.h). Connections that fail
// any step are logged and dropped; handshakes run on their own threads so a
// slow or silent stranger cannot hold up the real peers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "braid/host.h"
#include "comm/transport/wire.h"

namespace braid::comm {

// The fixed-size hello a connecting rank sends after the handshake.
struct TcpHello {
  uint32_t magic;
  int32_t rank;
  int32_t size;
  int32_t stream;  // which of the pair's connections (0 .. streams-1)
  char token[32];
};
// Where a received hello goes in tcp_accept's fds: rank * streams + stream.
// Error(kProtocol) for a hello from another job or communicator (magic,
// size or token differ), or one naming a rank not in `expect` or a
// connection index outside [0, streams).
size_t tcp_hello_slot(const TcpHello& h, const std::string& token, int size, const std::vector<int>& expect,
                      int streams);

// SO_SNDBUF/SO_RCVBUF (bytes <= 0: leave the kernel's autotuning).
void tcp_set_buffers(int fd, int bytes);

// Creates the listening socket (loopback only when every TCP peer is on
// this host) and publishes its address and how many connections per peer
// it takes (`streams`). Returns the fd.
int tcp_listen(const WireContext& ctx, bool all_local, int buf_bytes, int streams);

// Opens `streams` connections to rank q (its address read from the store
// once), each authenticated and introduced by a hello naming its index.
// Returns their fds, by index. Throws Error(kTimeout) naming q when it
// cannot be reached in time, Error(kMismatch) when q takes another number
// of connections per peer.
std::vector<int> tcp_connect(const WireContext& ctx, int q, int buf_bytes, int streams);

// Accepts until every rank in `expect` has opened all `streams`
// connections; fds[rank * streams + stream] receives each. Throws
// Error(kTimeout) naming the ranks still missing.
void tcp_accept(const WireContext& ctx, int lfd, const std::vector<int>& expect, std::vector<int>& fds,
                int streams);

}  // namespace braid::comm
