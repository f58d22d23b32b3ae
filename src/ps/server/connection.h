// One accepted connection of a parameter server: its link and buffers.
// server.cc reads the first frame (the hello) and hands the connection to
// the handler of the role the hello names (connection.cc): a worker, a
// chain predecessor, a peer's hot-key refreshes, or a joining server.
// Private to src/ps.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ps/io/link.h"
#include "ps/io/reply_buf.h"
#include "ps/io/shm_channel.h"

namespace braid::ps {

struct Connection {
  Connection(int fd, int poll_ms) : fd(fd), link(fd, poll_ms) {}
  int fd;
  // Requests are read through `link` (io/link.h, io/frame_reader.h): one
  // recv waits for a request (up to the poll, then the server's stop is
  // checked) and takes it with whatever the peer queued behind it; a request
  // already buffered is served without touching the socket. After a
  // worker's hello that moves the connection to shared memory (`moving`),
  // frames are read where they lie in the ring.
  Link link;
  std::unique_ptr<ShmChannel> moving;  // the link moves onto it after the hello's reply
  std::vector<uint8_t> in;             // a payload too large to use where the link holds it
  ReplyBuf out;                        // on a shared-memory link, placed in the outgoing ring
  int worker = -1;                     // a worker connection's worker, once attached
  bool gone = false;  // the peer's end closed, not this server (ShardState::detach)
};

}  // namespace braid::ps
