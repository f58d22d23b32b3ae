#include "comm/store/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "braid/env.h"
#include "braid/error.h"

namespace braid::comm {
namespace {

constexpr size_t kNonce = 32;
constexpr size_t kMac = 32;
constexpr uint32_t kMagic = 0x62726431;  // "brd1"

void wait_fd(int fd, short events, int64_t deadline_ns, const char* what) {
  for (;;) {
    int64_t left_ms = (deadline_ns - int64_t(now_ns())) / 1000000;
    if (left_ms <= 0) throw Error(Errc::kTimeout, std::string(what) + ": timed out");
    pollfd p{fd, events, 0};
    int r = ::poll(&p, 1, int(std::min<int64_t>(left_ms, 1000)));
    if (r > 0) return;
    if (r < 0 && errno != EINTR) throw_errno(std::string(what) + ": poll");
  }
}

void mac(const std::string& secret, char role, const uint8_t* a, const uint8_t* b, uint8_t* out) {
  uint8_t msg[1 + 2 * kNonce];
  msg[0] = uint8_t(role);
  std::memcpy(msg + 1, a, kNonce);
  std::memcpy(msg + 1 + kNonce, b, kNonce);
  unsigned int len = kMac;
  if (!HMAC(EVP_sha256(), secret.data(), int(secret.size()), msg, sizeof msg, out, &len))
    throw Error(Errc::kInternal, "HMAC-SHA256 failed");
}

// The socket non-blocking while it lives, then as it was. read_full waits
// for the rest of a frame with MSG_WAITALL, which on a blocking socket
// ignores the deadline: a peer that sends half a hello and falls silent
// (slowloris) would hold the handshake forever.
class NonBlocking {
 public:
  explicit NonBlocking(int fd) : fd_(fd), flags_(::fcntl(fd, F_GETFL)) {
    if (flags_ >= 0 && !(flags_ & O_NONBLOCK)) ::fcntl(fd_, F_SETFL, flags_ | O_NONBLOCK);
  }
  ~NonBlocking() {
    if (flags_ >= 0 && !(flags_ & O_NONBLOCK)) ::fcntl(fd_, F_SETFL, flags_);
  }
  NonBlocking(const NonBlocking&) = delete;
  NonBlocking& operator=(const NonBlocking&) = delete;

 private:
  int fd_, flags_;
};

// role 'S' = acceptor, 'C' = connector.
void exchange(int fd, const std::string& secret, std::chrono::milliseconds timeout, char role) {
  const NonBlocking nb(fd);
  int64_t deadline = int64_t(now_ns()) + int64_t(timeout.count()) * 1000000;
  struct Hello {
    uint32_t magic;
    uint8_t nonce[kNonce];
  } mine{}, theirs{};
  mine.magic = kMagic;
  if (RAND_bytes(mine.nonce, kNonce) != 1) throw Error(Errc::kInternal, "RAND_bytes failed");
  write_full(fd, &mine, sizeof mine, deadline, "authentication hello");
  read_full(fd, &theirs, sizeof theirs, deadline, "authentication hello");
  if (theirs.magic != kMagic)
    throw Error(Errc::kAuth, "peer did not speak the braid handshake (bad magic)");
  uint8_t proof[kMac], their_proof[kMac], expect[kMac];
  mac(secret, role, theirs.nonce, mine.nonce, proof);
  write_full(fd, proof, kMac, deadline, "authentication proof");
  read_full(fd, their_proof, kMac, deadline, "authentication proof");
  mac(secret, role == 'S' ? 'C' : 'S', mine.nonce, theirs.nonce, expect);
  if (CRYPTO_memcmp(expect, their_proof, kMac) != 0)
    throw Error(Errc::kAuth, "peer failed to prove the job secret");
}

}  // namespace

void write_full(int fd, const void* buf, size_t n, int64_t deadline_ns, const char* what) {
  // MSG_DONTWAIT: a blocking send into a full buffer (a peer that stopped
  // reading) would wait past the deadline; poll waits up to it instead.
  const uint8_t* p = static_cast<const uint8_t*>(buf);
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      p += w;
      n -= size_t(w);
      continue;
    }
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      wait_fd(fd, POLLOUT, deadline_ns, what);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EPIPE || errno == ECONNRESET))
      throw Error(Errc::kPeerDied, std::string(what) + ": connection closed by peer");
    throw_errno(std::string(what) + ": send");
  }
}

size_t read_at_least(int fd, void* buf, size_t min, size_t max, int64_t deadline_ns,
                     const char* what) {
  uint8_t* p = static_cast<uint8_t*>(buf);
  size_t got = 0;
  bool first = true;
  while (got < min) {
    const ssize_t r = ::recv(fd, p + got, first ? max - got : min - got, first ? 0 : MSG_WAITALL);
    first = false;
    if (r > 0) {
      got += size_t(r);
      continue;
    }
    if (r == 0) throw Error(Errc::kPeerDied, std::string(what) + ": connection closed by peer");
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      wait_fd(fd, POLLIN, deadline_ns, what);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == ECONNRESET)
      throw Error(Errc::kPeerDied, std::string(what) + ": connection reset by peer");
    throw_errno(std::string(what) + ": recv");
  }
  return got;
}

void read_full(int fd, void* buf, size_t n, int64_t deadline_ns, const char* what) {
  read_at_least(fd, buf, n, n, deadline_ns, what);
}

void authenticate_accept(int fd, const std::string& secret, std::chrono::milliseconds timeout) {
  exchange(fd, secret, timeout, 'S');
}
void authenticate_connect(int fd, const std::string& secret, std::chrono::milliseconds timeout) {
  exchange(fd, secret, timeout, 'C');
}

}  // namespace braid::comm
