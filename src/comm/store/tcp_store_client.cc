// TcpStore client: one authenticated connection per Store object, shared by
// every thread that uses it.
//
// Requests are tagged with an id and a background reader thread routes each
// response to the thread that asked, so a get() blocked on one thread does
// not hold up a set() on another (which may be the very set it waits for).
// When the connection dies every pending and later call fails with
// Error(kPeerDied) naming the store's address.
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <thread>

#include "braid/env.h"
#include "braid/error.h"
#include "braid/log.h"
#include "braid/store.h"
#include "comm/store/auth.h"
#include "comm/store/tcp_store_wire.h"

namespace braid {

using namespace comm::store_wire;

namespace {

// Extra time the client allows beyond a get/wait timeout for the server's
// timed-out answer to arrive before giving up on its own.
constexpr int64_t kReplyGraceNs = 10'000'000'000;

int64_t deadline_after(std::chrono::milliseconds t) {
  return int64_t(now_ns()) + int64_t(t.count()) * 1000000;
}

// One non-blocking connect attempt to any address of host:port, bounded by
// `deadline`. Returns the socket, or -1 with `err` set.
int try_connect(const std::string& host, int port, int64_t deadline, std::string* err) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::string service = std::to_string(port);
  int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0) {
    *err = std::string("cannot resolve host: ") + gai_strerror(rc);
    return -1;
  }
  int out = -1;
  for (addrinfo* ai = res; ai && out < 0; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      *err = std::strerror(errno);
      continue;
    }
    int r = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (r != 0 && errno == EINPROGRESS) {
      int64_t left_ms = (deadline - int64_t(now_ns())) / 1000000;
      pollfd p{fd, POLLOUT, 0};
      int pr = ::poll(&p, 1, int(std::clamp<int64_t>(left_ms, 1, 5000)));
      if (pr > 0) {
        int so = 0;
        socklen_t len = sizeof so;
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &len);
        r = so == 0 ? 0 : -1;
        errno = so;
      } else {
        r = -1;
        errno = ETIMEDOUT;
      }
    }
    if (r == 0) {
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      out = fd;
    } else {
      *err = std::strerror(errno);
      ::close(fd);
    }
  }
  ::freeaddrinfo(res);
  return out;
}

class TcpStore : public Store {
 public:
  TcpStore(int fd, std::string addr) : fd_(fd), addr_(std::move(addr)) {
    reader_ = std::thread([this] { read_loop(); });
  }

  ~TcpStore() override {
    ::shutdown(fd_, SHUT_RDWR);
    reader_.join();
    ::close(fd_);
  }

  void set(const std::string& key, const Bytes& value) override {
    check_key(key);
    check_value(value, "set");
    auto f = start(kSet);
    put_str(f, key);
    put_bytes(f, value.data(), value.size());
    call(std::move(f), deadline_after(timeout_), "set", key);
  }

  Bytes get(const std::string& key) override {
    check_key(key);
    auto f = start(kGet);
    put_str(f, key);
    put_u64(f, uint64_t(timeout_.count()));
    return call(std::move(f), deadline_after(timeout_) + kReplyGraceNs, "get", key);
  }

  int64_t add(const std::string& key, int64_t delta) override {
    check_key(key);
    auto f = start(kAdd);
    put_str(f, key);
    put_u64(f, uint64_t(delta));
    Bytes r = call(std::move(f), deadline_after(timeout_), "add", key);
    if (r.size() != 8) protocol_error("add", r.size());
    return int64_t(get_u64(r.data()));
  }

  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override {
    check_key(key);
    check_value(expected, "compare_set");
    check_value(desired, "compare_set");
    auto f = start(kCompareSet);
    put_str(f, key);
    put_bytes(f, expected.data(), expected.size());
    put_bytes(f, desired.data(), desired.size());
    return call(std::move(f), deadline_after(timeout_), "compare_set", key);
  }

  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    BRAID_CHECK_ARG(keys.size() <= kMaxWaitKeys,
                    "store wait: more than " + std::to_string(kMaxWaitKeys) + " keys");
    size_t total = 0;
    for (auto& k : keys) {
      check_key(k);
      total += k.size() + 4;
    }
    BRAID_CHECK_ARG(total < kMaxRequestBody - 64, "store wait: the key list is too long");
    if (keys.empty()) return;
    auto f = start(kWait);
    put_u32(f, uint32_t(keys.size()));
    for (auto& k : keys) put_str(f, k);
    put_u64(f, uint64_t(timeout.count()));
    call(std::move(f), deadline_after(timeout) + kReplyGraceNs, "wait", keys[0]);
  }

  bool remove(const std::string& key) override { return key_question(kRemove, "remove", key); }

  bool check(const std::string& key) override { return key_question(kCheck, "check", key); }

 private:
  // A request naming one key whose reply is one byte, true when nonzero.
  bool key_question(Op op, const char* name, const std::string& key) {
    check_key(key);
    auto f = start(op);
    put_str(f, key);
    Bytes r = call(std::move(f), deadline_after(timeout_), name, key);
    if (r.size() != 1) protocol_error(name, r.size());
    return r[0] != 0;
  }

  struct Pending {
    bool done = false;
    uint8_t status = 0;
    Bytes payload;
  };

  static void check_key(const std::string& key) {
    BRAID_CHECK_ARG(key.size() <= kMaxKey, "store: key longer than " + std::to_string(kMaxKey) +
                                               " bytes: '" + key.substr(0, 64) + "...'");
  }
  static void check_value(const Bytes& v, const char* op) {
    BRAID_CHECK_ARG(v.size() <= kMaxValue, std::string("store ") + op + ": value of " +
                                               std::to_string(v.size()) +
                                               " bytes exceeds the 64 MiB limit");
  }

  [[noreturn]] void protocol_error(const char* op, size_t n) {
    throw Error(Errc::kProtocol, "store at " + addr_ + ": malformed " + op + " reply (" +
                                     std::to_string(n) + " bytes)");
  }

  std::vector<uint8_t> start(Op op) {
    std::vector<uint8_t> f = begin_frame();
    put_u64(f, 0);  // id, filled in by call()
    f.push_back(uint8_t(op));
    return f;
  }

  std::string closed_msg() const { return "store at " + addr_ + " closed the connection"; }

  Bytes call(std::vector<uint8_t> frame, int64_t deadline, const char* op, const std::string& key) {
    uint64_t id = next_id_.fetch_add(1);
    for (int i = 0; i < 8; ++i) frame[size_t(4 + i)] = uint8_t(id >> (8 * i));
    finish_frame(frame);
    {
      std::lock_guard<std::mutex> l(mu_);
      if (dead_) throw Error(Errc::kPeerDied, dead_msg_);
      pending_[id];
    }
    try {
      std::lock_guard<std::mutex> wl(write_mu_);
      comm::write_full(fd_, frame.data(), frame.size(), deadline, "store request");
    } catch (const Error& e) {
      std::lock_guard<std::mutex> l(mu_);
      pending_.erase(id);
      if (e.code() == Errc::kPeerDied) throw Error(Errc::kPeerDied, closed_msg());
      throw Error(e.code(), "store at " + addr_ + ": " + op + " '" + key + "': " + e.what());
    }
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
      auto it = pending_.find(id);
      if (it->second.done) {
        Pending p = std::move(it->second);
        pending_.erase(it);
        if (p.status == kOk) return std::move(p.payload);
        std::string msg(p.payload.begin(), p.payload.end());
        if (p.status == kTimedOut)
          throw Error(Errc::kTimeout, "store at " + addr_ + ": " + op + ": " + msg);
        throw Error(Errc::kInvalidArgument, "store at " + addr_ + ": " + msg);
      }
      if (dead_) {
        pending_.erase(it);
        throw Error(Errc::kPeerDied, dead_msg_);
      }
      int64_t left = deadline - int64_t(now_ns());
      if (left <= 0) {
        pending_.erase(it);
        throw Error(Errc::kTimeout, "store at " + addr_ + ": " + op + " '" + key +
                                        "': no reply from the store before the deadline");
      }
      cv_.wait_for(l, std::chrono::nanoseconds(std::min<int64_t>(left, 1'000'000'000)));
    }
  }

  void read_loop() {
    const int64_t forever = std::numeric_limits<int64_t>::max() / 2;
    std::string why;
    Errc code = Errc::kPeerDied;
    try {
      for (;;) {
        uint8_t hdr[4];
        comm::read_full(fd_, hdr, 4, forever, "store reply");
        uint32_t len = 0;
        if (cut_frame(hdr, 4, kMaxResponseBody, &len) == Cut::kBad)
          throw Error(Errc::kProtocol, "store at " + addr_ + " sent a reply of length " +
                                           std::to_string(len));
        Bytes body(len);
        comm::read_full(fd_, body.data(), len, forever, "store reply");
        const Response r = parse_response(body.data(), body.size());
        std::lock_guard<std::mutex> l(mu_);
        auto it = pending_.find(r.id);
        if (it == pending_.end()) continue;  // its caller gave up
        it->second.status = r.status;
        it->second.payload.assign(r.payload, r.payload + r.payload_len);
        it->second.done = true;
        cv_.notify_all();
      }
    } catch (const Error& e) {
      if (e.code() == Errc::kProtocol) {
        code = Errc::kProtocol;
        why = e.what();
      }
    } catch (const std::exception& e) {
      why = e.what();
    }
    std::lock_guard<std::mutex> l(mu_);
    dead_ = true;
    dead_msg_ = why.empty() || code == Errc::kPeerDied ? closed_msg() : why;
    cv_.notify_all();
  }

  int fd_;
  std::string addr_;
  std::atomic<uint64_t> next_id_{1};
  std::mutex write_mu_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Pending> pending_;
  bool dead_ = false;
  std::string dead_msg_;
  std::thread reader_;
};

}  // namespace

std::shared_ptr<Store> connect_tcp_store(const std::string& host, int port,
                                         const std::string& secret,
                                         std::chrono::milliseconds timeout) {
  BRAID_CHECK_ARG(port > 0 && port < 65536,
                  "connect_tcp_store: port " + std::to_string(port) + " out of range");
  std::string addr = host + ":" + std::to_string(port);
  int64_t deadline = deadline_after(timeout);
  std::string last = "not tried";
  int sleep_ms = 10;
  for (;;) {
    int fd = try_connect(host, port, deadline, &last);
    if (fd >= 0) {
      try {
        int64_t left_ms = std::max<int64_t>((deadline - int64_t(now_ns())) / 1000000, 5000);
        comm::authenticate_connect(fd, secret, std::chrono::milliseconds(left_ms));
        auto s = std::make_shared<TcpStore>(fd, addr);
        s->set_timeout(timeout);
        return s;
      } catch (const Error& e) {
        ::close(fd);
        if (e.code() == Errc::kAuth)
          throw Error(Errc::kAuth, "store at " + addr + ": " + e.what() +
                                       " (is BRAID_SECRET the same on every node?)");
        // The server may be shutting down or shedding load; try again.
        last = e.what();
      }
    }
    if (int64_t(now_ns()) + int64_t(sleep_ms) * 1000000 > deadline)
      throw Error(Errc::kTimeout, "could not connect to the store at " + addr + " within " +
                                      std::to_string(timeout.count()) + " ms: " + last);
    std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    sleep_ms = std::min(sleep_ms * 2, 500);
  }
}

}  // namespace braid
