// One connection between a worker and a server, as both ends use it: its
// socket, the reader of its frames, and, between processes on one host,
// the shared-memory rings that carry its frames instead of the socket
// (shm_channel.h). Private to src/ps.
//
// A connection starts on TCP: the job secret's handshake and the hello go
// over the socket. A worker whose server is on its host (the store's
// "ps/host/<server>" equals its own host identity: same kernel, same PID
// namespace) offers a fresh segment in the hello, as the /proc path of
// its file; a server that can map it says so in the hello's reply, and
// from then on both ends send and receive through the rings, the socket
// carrying only wake-ups. Where anything of that fails, the connection
// simply stays on TCP.
//
// The receiving calls keep FrameReader's contract (frame_reader.h): bytes
// in order, each once; take()'s pointer holds until the next call on the
// link. On the rings take() hands out the bytes where they lie, for frames
// up to the ring's capacity; they are freed for the writer at the next call.
#pragma once

#include <sys/uio.h>

#include <memory>
#include <vector>

#include "ps/io/frame_reader.h"
#include "ps/io/shm_channel.h"
#include "ps/io/wire.h"

namespace braid::ps {

class Link {
 public:
  // idle_ms: how long arrived() waits for a frame to begin.
  explicit Link(int fd = -1, int idle_ms = 100) : fd_(fd), idle_ms_(idle_ms) {}
  int fd() const { return fd_; }
  // From now on frames travel through `ch` (nothing may be buffered).
  void use_shm(std::unique_ptr<ShmChannel> ch);
  bool shm() const { return ch_ != nullptr; }
  // The largest payload take() hands out without copying it here:
  // the ring's capacity, or `tcp_max` on TCP.
  size_t in_place_max(size_t tcp_max) const { return ch_ ? ch_->capacity() : tcp_max; }

  void send(const wire::Header& h, const void* payload, int64_t deadline_ns, const char* what);
  // On the rings: where a reply's payload can be built in place (behind
  // its header's place), and the free room there; null on TCP or when no
  // room is free. send_placed then sends h with the h.payload bytes built
  // there (nothing to wait for: they are in place). Nothing else may be
  // sent in between.
  uint8_t* reply_area(size_t* room);
  void send_placed(const wire::Header& h, const char* what);
  // Sends every byte iov names, in order (it may be consumed).
  void send_gather(std::vector<iovec>& iov, int64_t deadline_ns, const char* what);

  // FrameReader's calls (frame_reader.h), on whichever carries the frames.
  size_t buffered() const;
  bool arrived(const char* what);
  wire::Header header(int64_t deadline_ns, const char* what);
  void payload(void* dst, size_t n, int64_t deadline_ns, const char* what);
  const uint8_t* take(size_t n, int64_t deadline_ns, const char* what);
  void want(size_t n, int64_t deadline_ns, const char* what);

 private:
  void release();  // frees what the last take() handed out of the ring
  void await(size_t n, int64_t deadline_ns, const char* what);

  int fd_;
  int idle_ms_;
  wire::FrameReader rx_;
  std::unique_ptr<ShmChannel> ch_;
  size_t taken_ = 0;
  std::vector<uint8_t> spill_;  // a take() larger than the ring
};

}  // namespace braid::ps
