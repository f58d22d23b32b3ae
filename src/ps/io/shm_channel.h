// Shared-memory rings between a worker and a server process on one host.
// Private to src/ps; used through ps/io/link.h.
//
// A segment holds a control page and two byte rings, one per direction
// (ring 0: the worker's requests, ring 1: the server's replies). Each
// ring's pages are mapped twice, back to back, so any span of up to
// `capacity` bytes starting anywhere in the ring is contiguous in memory:
// a reader uses a frame where it lies (the server applies a pushed gradient
// straight from the ring, with no copy into a buffer of its own), and a
// writer copies a frame's parts in without splitting them at the wrap.
//
// Waiting goes through the connection's TCP socket, which after the hello
// carries only doorbell bytes. A side that finds nothing to read (or no
// room to write) raises its flag in the ring, looks once more, then polls
// the socket; the other side, after publishing, sends one byte if it finds
// that flag raised (and lowers it). Both sides order "publish, then look at
// the flag" and "raise the flag, then look at the ring" with seq_cst
// operations, so a waiter that goes to sleep is always woken. Why the
// socket and not a futex: a peer's death closes its socket, so a waiter
// learns of it at once, as on TCP, and a waiter never spins on a core the
// job's oversubscribed ranks need.
//
// Invariants: one thread at a time sends on a channel and one receives
// (the connection's owner); head and tail only grow; head - tail <=
// capacity; bytes in [tail, head) are the reader's, the rest the writer's.
// Each side keeps its own counter (the writer's head, the reader's tail)
// in private memory and only publishes it to the segment; the peer's
// counter, read from the segment, is checked against it (at most a ring
// apart, in the right direction) before it is used, so a peer that writes
// nonsense there gets Error(kProtocol), never a read or write outside the
// ring. The segment's file is sealed against shrinking, and a server maps
// no other: no peer can take pages away from under a mapping.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace braid::ps {

class ShmChannel {
 public:
  // The worker's side: a fresh segment (an anonymous memory file: it has no
  // name that could outlive the processes) with two rings of at least
  // `capacity` bytes, rounded up to whole pages. Throws Error(kIo) naming
  // the call that failed.
  static std::unique_ptr<ShmChannel> create(size_t capacity);
  // How a process in this one's PID namespace opens the segment
  // ("pid:fd", through /proc); valid until close_offer().
  std::string offer() const;
  // Closes the file the offer names (the mappings stay).
  void close_offer();
  // The server's side of an offer; throws Error(kIo) if it cannot be opened
  // and Error(kProtocol) if it is not a channel.
  static std::unique_ptr<ShmChannel> attach(const std::string& offer);
  // Whether `offer` has offer()'s form (a server opens nothing else on a
  // client's word).
  static bool valid_offer(const std::string& offer);

  ~ShmChannel();
  ShmChannel(const ShmChannel&) = delete;
  ShmChannel& operator=(const ShmChannel&) = delete;

  size_t capacity() const { return cap_; }

  // Copies every byte iov names into the outgoing ring, in order, waiting
  // for room as the reader frees it (a frame may exceed the ring). `fd` is
  // the connection's socket. Throws kTimeout at the deadline and
  // kPeerDied when the socket closes first.
  void write(int fd, const iovec* iov, size_t n, int64_t deadline_ns, const char* what);

  // The outgoing ring's free room, contiguous from the returned byte: a
  // writer may build bytes there, then commit them (nothing written in
  // between).
  uint8_t* write_area(size_t* room);
  void commit(int fd, size_t n);

  // Bytes published and not yet consumed in the incoming ring; throws
  // Error(kProtocol) when the peer's counter says more than a ring.
  size_t readable() const;
  // The first of them; contiguous for readable() bytes.
  const uint8_t* peek() const;
  // Frees n readable bytes for the writer.
  void consume(int fd, size_t n);
  // Waits until n (<= capacity) bytes are readable. False if the deadline
  // passed first; throws kPeerDied when the socket closes with fewer.
  bool wait_readable(int fd, size_t n, int64_t deadline_ns, const char* what);

 private:
  struct Ring;
  struct Ctl;
  ShmChannel() = default;
  static std::unique_ptr<ShmChannel> map(int fd, size_t cap, bool creator, const std::string& name);
  // Waits until ready() holds, raising `flag` before the last look.
  template <class Ready>
  bool wait(int fd, std::atomic<uint32_t>& flag, Ready ready, int64_t deadline_ns, const char* what);
  void drain(int fd);  // reads pending doorbell bytes; notes a closed socket
  // The peer's counters, checked against this side's own (Error(kProtocol)).
  uint64_t peer_tail(std::memory_order order) const;
  uint64_t peer_head(std::memory_order order) const;

  size_t cap_ = 0;
  Ctl* ctl_ = nullptr;
  size_t ctl_len_ = 0;
  uint8_t* ring_[2] = {nullptr, nullptr};  // each mapped twice: 2 * cap_ bytes
  int tx_ = 0, rx_ = 1;
  uint64_t tx_head_ = 0;  // bytes this side has published on its outgoing ring
  uint64_t rx_tail_ = 0;  // bytes this side has consumed of its incoming ring
  int file_ = -1;  // the creator's segment file, until close_offer()
  bool peer_closed_ = false;
};

}  // namespace braid::ps
