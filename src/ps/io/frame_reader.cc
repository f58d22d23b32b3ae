// Buffered frame reading (why and invariants: frame_reader.h).
#include "ps/io/frame_reader.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "braid/env.h"
#include "braid/error.h"
#include "comm/store/auth.h"

namespace braid::ps::wire {

bool FrameReader::arrived(int fd, const char* what) {
  if (buffered()) return true;
  pos_ = end_ = 0;
  for (;;) {
    const ssize_t r = ::recv(fd, buf_.data(), buf_.size(), 0);
    if (r > 0) {
      end_ = size_t(r);
      return true;
    }
    if (r == 0) throw Error(Errc::kPeerDied, std::string(what) + ": connection closed by peer");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
    if (errno == ECONNRESET)
      throw Error(Errc::kPeerDied, std::string(what) + ": connection reset by peer");
    throw_errno(std::string(what) + ": recv");
  }
}

void FrameReader::want(int fd, size_t n, int64_t deadline_ns, const char* what) {
  const size_t have = buffered();
  if (have >= n) return;
  if (buf_.size() - pos_ < n) {  // make room: keep the unread bytes at the front
    if (have) std::memmove(buf_.data(), buf_.data() + pos_, have);
    pos_ = 0;
    end_ = have;
    if (buf_.size() < n) buf_.resize(n);
  }
  end_ += comm::read_at_least(fd, buf_.data() + end_, n - have, buf_.size() - end_, deadline_ns, what);
}

Header FrameReader::header(int fd, int64_t deadline_ns, const char* what) {
  Header h;
  std::memcpy(&h, take(fd, sizeof h, deadline_ns, what), sizeof h);
  check_magic(h, what);
  return h;
}

const uint8_t* FrameReader::take(int fd, size_t n, int64_t deadline_ns, const char* what) {
  want(fd, n, deadline_ns, what);
  const uint8_t* p = buf_.data() + pos_;
  pos_ += n;
  if (pos_ == end_) pos_ = end_ = 0;
  return p;
}

void FrameReader::payload(int fd, void* dst, size_t n, int64_t deadline_ns, const char* what) {
  const size_t have = std::min(n, buffered());
  if (have) std::memcpy(dst, buf_.data() + pos_, have);
  pos_ += have;
  if (pos_ == end_) pos_ = end_ = 0;
  if (n > have)
    comm::read_at_least(fd, static_cast<uint8_t*>(dst) + have, n - have, n - have, deadline_ns, what);
}

}  // namespace braid::ps::wire
