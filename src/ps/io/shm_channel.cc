// Shared-memory rings (protocol and invariants: shm_channel.h).
#include "ps/io/shm_channel.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "braid/env.h"
#include "braid/error.h"

namespace braid::ps {

namespace {
constexpr uint64_t kMagic = 0x314e484353504252ull;  // "RBPSCHN1"
// A whole frame the server uses in place must fit; more only costs memory.
constexpr size_t kMaxCapacity = size_t(1) << 30;

size_t page() { return size_t(::sysconf(_SC_PAGESIZE)); }
size_t whole_pages(size_t n) { return (n + page() - 1) / page() * page(); }

[[noreturn]] void fail(const std::string& what) {
  throw Error(Errc::kIo, what + ": " + std::strerror(errno));
}

// The other side moved its counter where no counter of a well-behaved peer
// can be: more than a ring's worth ahead of (or behind) this side's own.
[[noreturn]] void bad_counter(const char* whose, uint64_t theirs, uint64_t mine, size_t cap) {
  throw Error(Errc::kProtocol, std::string("parameter-server shared memory: the peer's ") + whose + " counter " +
                                   std::to_string(theirs) + " is outside the ring (" + std::to_string(mine) +
                                   " here, capacity " + std::to_string(cap) + ")");
}
}  // namespace

struct ShmChannel::Ring {
  alignas(64) std::atomic<uint64_t> head;  // bytes published by the writer
  alignas(64) std::atomic<uint64_t> tail;  // bytes consumed by the reader
  alignas(64) std::atomic<uint32_t> reader_waits;
  alignas(64) std::atomic<uint32_t> writer_waits;
};

struct ShmChannel::Ctl {
  uint64_t magic;
  uint64_t capacity;
  Ring ring[2];
};

std::string ShmChannel::offer() const {
  return std::to_string(::getpid()) + ":" + std::to_string(file_);
}

void ShmChannel::close_offer() {
  if (file_ >= 0) ::close(file_);
  file_ = -1;
}

bool ShmChannel::valid_offer(const std::string& offer) {
  const size_t colon = offer.find(':');
  if (offer.size() > 24 || colon == std::string::npos || colon == 0 || colon + 1 == offer.size())
    return false;
  for (size_t i = 0; i < offer.size(); ++i)
    if (i != colon && !(offer[i] >= '0' && offer[i] <= '9')) return false;
  return true;
}

std::unique_ptr<ShmChannel> ShmChannel::create(size_t capacity) {
  const size_t cap = std::min(kMaxCapacity, whole_pages(std::max<size_t>(capacity, 1)));
  const int fd = ::memfd_create("braid-ps-link", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) fail("parameter-server shared memory: memfd_create");
  const size_t total = whole_pages(sizeof(Ctl)) + 2 * cap;
  // Reserve the pages now: a memory limit too small fails here, not with
  // SIGBUS at the first touch.
  // Sealed at that size: the server maps it, and a file that could shrink
  // under a mapping would kill its reader with SIGBUS.
  int e = ::ftruncate(fd, off_t(total)) == 0 ? ::posix_fallocate(fd, 0, off_t(total)) : errno;
  if (e == 0 && ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) e = errno;
  if (e != 0) {
    ::close(fd);
    errno = e;
    fail("parameter-server shared memory: reserving " + std::to_string(total) + " bytes");
  }
  try {
    auto ch = map(fd, cap, true, "a new segment");
    ch->file_ = fd;
    return ch;
  } catch (...) {
    ::close(fd);
    throw;
  }
}

std::unique_ptr<ShmChannel> ShmChannel::attach(const std::string& offer) {
  BRAID_CHECK_ARG(valid_offer(offer), "not a shared-memory offer: '" + offer + "'");
  const size_t colon = offer.find(':');
  const std::string path = "/proc/" + offer.substr(0, colon) + "/fd/" + offer.substr(colon + 1);
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) fail("parameter-server shared memory: open " + path);
  struct stat st {};
  Ctl head{};
  const size_t ctl_len = whole_pages(sizeof(Ctl));
  bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && size_t(st.st_size) > ctl_len &&
            ::pread(fd, &head, sizeof head.magic + sizeof head.capacity, 0) ==
                ssize_t(sizeof head.magic + sizeof head.capacity);
  ok = ok && head.magic == kMagic && head.capacity % page() == 0 && head.capacity <= kMaxCapacity &&
       size_t(st.st_size) == ctl_len + 2 * head.capacity;
  // Only a file sealed against shrinking: no peer can then pull pages out
  // from under this side's mappings.
  ok = ok && (::fcntl(fd, F_GET_SEALS) & F_SEAL_SHRINK) != 0;
  if (!ok) {
    ::close(fd);
    throw Error(Errc::kProtocol, "parameter-server shared memory: " + path + " is not a channel");
  }
  try {
    auto ch = map(fd, size_t(head.capacity), false, path);
    ::close(fd);
    return ch;
  } catch (...) {
    ::close(fd);
    throw;
  }
}

std::unique_ptr<ShmChannel> ShmChannel::map(int fd, size_t cap, bool creator, const std::string& name) {
  std::unique_ptr<ShmChannel> ch(new ShmChannel);
  ch->cap_ = cap;
  ch->ctl_len_ = whole_pages(sizeof(Ctl));
  void* c = ::mmap(nullptr, ch->ctl_len_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (c == MAP_FAILED) fail("parameter-server shared memory: mmap " + name);
  ch->ctl_ = static_cast<Ctl*>(c);
  for (int i = 0; i < 2; ++i) {
    // Reserve 2·cap of address space, then map the ring's pages into both halves.
    void* base = ::mmap(nullptr, 2 * cap, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) fail("parameter-server shared memory: reserving address space");
    ch->ring_[i] = static_cast<uint8_t*>(base);
    const off_t off = off_t(ch->ctl_len_ + size_t(i) * cap);
    for (int half = 0; half < 2; ++half) {
      void* want = ch->ring_[i] + size_t(half) * cap;
      void* got = ::mmap(want, cap, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, off);
      if (got != want) fail("parameter-server shared memory: mapping a ring of " + name);
    }
  }
  if (creator) {
    // Fresh pages are zero: the counters and flags start at 0.
    ch->ctl_->capacity = cap;
    std::atomic_thread_fence(std::memory_order_release);
    ch->ctl_->magic = kMagic;
  } else {
    ch->tx_ = 1;
    ch->rx_ = 0;
  }
  return ch;
}

ShmChannel::~ShmChannel() {
  close_offer();
  for (uint8_t* r : ring_)
    if (r) ::munmap(r, 2 * cap_);
  if (ctl_) ::munmap(ctl_, ctl_len_);
}

void ShmChannel::drain(int fd) {
  uint8_t buf[64];
  for (;;) {
    const ssize_t r = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (r > 0) continue;
    if (r < 0 && errno == EINTR) continue;
    if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) peer_closed_ = true;
    return;
  }
}

namespace {
// Moves a ring's counter (head or tail) to v, then wakes the other side if
// it raised `flag` (waits for that counter to move): store, then look.
void advance(int fd, std::atomic<uint64_t>& counter, uint64_t v, std::atomic<uint32_t>& flag) {
  counter.store(v, std::memory_order_seq_cst);
  if (flag.load(std::memory_order_seq_cst) && flag.exchange(0, std::memory_order_seq_cst)) {
    const uint8_t b = 1;
    // A full socket buffer already holds wake-ups; a closed one means the
    // peer is gone, which its own waits and ours find out.
    (void)!::send(fd, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
  }
}
}  // namespace

template <class Ready>
bool ShmChannel::wait(int fd, std::atomic<uint32_t>& flag, Ready ready, int64_t deadline_ns,
                      const char* what) {
  for (;;) {
    if (ready()) return true;
    flag.store(1, std::memory_order_seq_cst);
    if (ready()) {
      flag.store(0, std::memory_order_relaxed);
      return true;
    }
    if (peer_closed_) {
      flag.store(0, std::memory_order_relaxed);
      throw Error(Errc::kPeerDied, std::string(what) + ": connection closed by peer");
    }
    const int64_t left_ns = deadline_ns - int64_t(now_ns());
    if (left_ns <= 0) {
      flag.store(0, std::memory_order_relaxed);
      return false;
    }
    pollfd p{fd, POLLIN, 0};
    const int rc = ::poll(&p, 1, int(std::min<int64_t>((left_ns + 999999) / 1000000, 1000)));
    if (rc < 0 && errno != EINTR) fail(std::string(what) + ": poll");
    if (rc > 0) drain(fd);
  }
}

void ShmChannel::write(int fd, const iovec* iov, size_t n, int64_t deadline_ns, const char* what) {
  Ring& r = ctl_->ring[tx_];
  uint8_t* base = ring_[tx_];
  uint64_t& head = tx_head_;
  auto publish = [&] { advance(fd, r.head, head, r.reader_waits); };
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* src = static_cast<const uint8_t*>(iov[i].iov_base);
    size_t left = iov[i].iov_len;
    while (left > 0) {
      uint64_t room = cap_ - (head - peer_tail(std::memory_order_acquire));
      if (room == 0) {
        publish();  // let the reader free what it can
        const bool ok = wait(fd, r.writer_waits, [&] {
          return head - peer_tail(std::memory_order_seq_cst) < cap_;
        }, deadline_ns, what);
        if (!ok) throw Error(Errc::kTimeout, std::string(what) + ": timed out");
        continue;
      }
      const size_t k = size_t(std::min<uint64_t>(left, room));
      std::memcpy(base + head % cap_, src, k);
      head += k;
      src += k;
      left -= k;
    }
  }
  publish();
}

uint64_t ShmChannel::peer_tail(std::memory_order order) const {
  const uint64_t t = ctl_->ring[tx_].tail.load(order);
  if (tx_head_ - t > cap_) bad_counter("read", t, tx_head_, cap_);
  return t;
}

uint64_t ShmChannel::peer_head(std::memory_order order) const {
  const uint64_t h = ctl_->ring[rx_].head.load(order);
  if (h - rx_tail_ > cap_) bad_counter("write", h, rx_tail_, cap_);
  return h;
}

uint8_t* ShmChannel::write_area(size_t* room) {
  *room = size_t(cap_ - (tx_head_ - peer_tail(std::memory_order_acquire)));
  return ring_[tx_] + tx_head_ % cap_;
}

void ShmChannel::commit(int fd, size_t n) {
  Ring& r = ctl_->ring[tx_];
  tx_head_ += n;
  advance(fd, r.head, tx_head_, r.reader_waits);
}

size_t ShmChannel::readable() const { return size_t(peer_head(std::memory_order_acquire) - rx_tail_); }

const uint8_t* ShmChannel::peek() const { return ring_[rx_] + rx_tail_ % cap_; }

void ShmChannel::consume(int fd, size_t n) {
  Ring& r = ctl_->ring[rx_];
  rx_tail_ += n;
  advance(fd, r.tail, rx_tail_, r.writer_waits);
}

bool ShmChannel::wait_readable(int fd, size_t n, int64_t deadline_ns, const char* what) {
  Ring& r = ctl_->ring[rx_];
  return wait(fd, r.reader_waits, [&] { return peer_head(std::memory_order_seq_cst) - rx_tail_ >= n; },
              deadline_ns, what);
}

}  // namespace braid::ps
