// Buffered reading of parameter-server frames (wire.h) from one connection.
// Private to src/ps.
//
// Why: reading a frame as a header, then a payload, then the next header,
// each with its own recv, made a step's exchange about a hundred syscalls
// per worker. A FrameReader takes, with one recv, a header and whatever
// has already arrived behind it (up to its buffer's capacity), and hands
// out the following headers and payloads from memory.
//
// Invariants:
//  - bytes are handed out in the order they arrived, each once; bytes
//    received past the current frame stay buffered for the next call, so
//    every read on the connection must go through its one reader (a peer
//    that sends nothing unasked leaves it empty between exchanges);
//  - the buffer grows only to a length the caller asked for (take, want),
//    so a caller that checks a length before asking bounds its allocation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ps/io/wire.h"

namespace braid::ps::wire {

class FrameReader {
 public:
  explicit FrameReader(size_t capacity = size_t(64) << 10) : buf_(capacity) {}

  // Bytes received and not yet handed out.
  size_t buffered() const { return end_ - pos_; }
  // Drops what is buffered (the connection is closed or its framing lost).
  void clear() { pos_ = end_ = 0; }

  // Whether bytes of a next frame are buffered: if none are, one recv waits
  // for them up to the socket's receive timeout (set_recv_timeout), so an
  // idle connection costs one syscall per timeout and a request one in all.
  // Throws kPeerDied when the peer closed the connection.
  bool arrived(int fd, const char* what);
  // The next frame's header; throws kProtocol on a bad magic (recv_header).
  Header header(int fd, int64_t deadline_ns, const char* what);
  // n bytes into dst: those buffered, the rest straight from the socket.
  void payload(int fd, void* dst, size_t n, int64_t deadline_ns, const char* what);
  // n bytes in the buffer; the pointer holds until the next call.
  const uint8_t* take(int fd, size_t n, int64_t deadline_ns, const char* what);
  // Makes n bytes buffered, receiving what is missing in as few recvs as
  // the peer's sending allows (e.g. a whole reply whose length is known).
  void want(int fd, size_t n, int64_t deadline_ns, const char* what);

 private:
  std::vector<uint8_t> buf_;
  size_t pos_ = 0, end_ = 0;
};

}  // namespace braid::ps::wire
