#include "launch/line_prefixer.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>

namespace braid::launch {
namespace {
constexpr size_t kMaxLine = 64 * 1024;
}

void write_all_fd(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w > 0) {
      p += w;
      n -= size_t(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd pf{fd, POLLOUT, 0};
      ::poll(&pf, 1, 1000);
      continue;
    }
    return;  // EPIPE and friends: nobody is reading
  }
}

void LinePrefixer::emit(const char* p, size_t n) {
  if (!show_) return;
  std::string line;
  line.reserve(prefix_.size() + n + 1);
  line += prefix_;
  line.append(p, n);
  line += '\n';
  write_all_fd(out_, line.data(), line.size());
}

bool LinePrefixer::pump(int fd) {
  char buf[65536];
  for (int rounds = 0; rounds < 16; ++rounds) {  // bounded: be fair to other ranks
    ssize_t r = ::read(fd, buf, sizeof buf);
    if (r == 0) return false;
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      return false;
    }
    // Batch the complete lines of this chunk into one write.
    std::string batch;
    size_t start = 0;
    for (size_t i = 0; i < size_t(r); ++i) {
      if (buf[i] != '\n') continue;
      if (show_) {
        batch += prefix_;
        batch += partial_;
        batch.append(buf + start, i - start);
        batch += '\n';
      }
      partial_.clear();
      start = i + 1;
    }
    if (!batch.empty()) write_all_fd(out_, batch.data(), batch.size());
    partial_.append(buf + start, size_t(r) - start);
    while (partial_.size() >= kMaxLine) {
      emit(partial_.data(), kMaxLine);
      partial_.erase(0, kMaxLine);
    }
  }
  return true;
}

void LinePrefixer::finish() {
  if (!partial_.empty()) emit(partial_.data(), partial_.size());
  partial_.clear();
}

}  // namespace braid::launch
