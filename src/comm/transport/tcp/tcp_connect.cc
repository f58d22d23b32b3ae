// Set-up of the TCP wire's connections: listen and publish, connect to
// the lower ranks, accept the higher ones. Every connection proves the job
// secret and then names its rank and communicator before it is kept.
#include "comm/transport/tcp/tcp_connect.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

#include "braid/env.h"
#include "braid/error.h"
#include "braid/log.h"
#include "comm/store/auth.h"
#include "core/log_limit.h"

namespace braid::comm {
namespace {

constexpr uint32_t kHelloMagic = 0x54647262;  // "brdT"
// Connections still proving the secret at once; more are closed on arrival.
constexpr size_t kMaxHandshakes = 256;

using Hello = TcpHello;
struct Ack {
  uint32_t magic;
  int32_t rank;
};

void copy_token(char (&out)[32], const std::string& t) {
  std::memset(out, 0, sizeof out);
  std::memcpy(out, t.data(), std::min(t.size(), sizeof out));
}

void set_buffers_(int fd, int bytes) {
  if (bytes <= 0) return;  // kernel autotuning
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
}

}  // namespace

size_t tcp_hello_slot(const TcpHello& h, const std::string& token, int size, const std::vector<int>& expect,
                      int streams) {
  char tok[32];
  copy_token(tok, token);
  if (h.magic != kHelloMagic || h.size != size || std::memcmp(tok, h.token, sizeof tok) != 0)
    throw Error(Errc::kProtocol, "hello from another job or communicator");
  if (h.rank < 0 || h.rank >= size || std::find(expect.begin(), expect.end(), h.rank) == expect.end())
    throw Error(Errc::kProtocol, "hello names rank " + std::to_string(h.rank) + ", which should not connect here");
  if (h.stream < 0 || h.stream >= streams)
    throw Error(Errc::kProtocol, "hello names connection " + std::to_string(h.stream) + " of rank " +
                                     std::to_string(h.rank) + ", but this rank takes " +
                                     std::to_string(streams) + " per peer");
  return size_t(h.rank) * size_t(streams) + size_t(h.stream);
}

TcpEndpoint tcp_local_endpoint(bool all_local) {
  if (auto a = env_str("BRAID_TCP_ADDR")) return {"", *a, "BRAID_TCP_ADDR"};
  if (all_local) return {"lo", "127.0.0.1", "loopback: every peer on this host"};
  TcpEndpoint best{"lo", "127.0.0.1", "loopback: no other interface is up"};
  ifaddrs* ifs = nullptr;
  if (::getifaddrs(&ifs) == 0) {
    for (ifaddrs* i = ifs; i; i = i->ifa_next) {
      if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
      if (!(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK)) continue;
      char buf[INET_ADDRSTRLEN];
      auto* sin = reinterpret_cast<sockaddr_in*>(i->ifa_addr);
      if (::inet_ntop(AF_INET, &sin->sin_addr, buf, sizeof buf)) {
        best = {i->ifa_name ? i->ifa_name : "", buf, "the first IPv4 interface that is up"};
        break;
      }
    }
    ::freeifaddrs(ifs);
  }
  return best;
}

void tcp_set_buffers(int fd, int bytes) { set_buffers_(fd, bytes); }

int tcp_listen(const WireContext& ctx, bool all_local, int buf_bytes, int streams) {
  int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (lfd < 0) throw_errno("tcp: socket");
  try {
    int one = 1;
    ::setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    set_buffers_(lfd, buf_bytes);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(all_local ? INADDR_LOOPBACK : INADDR_ANY);
    sa.sin_port = 0;
    if (::bind(lfd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) throw_errno("tcp: bind");
    if (::listen(lfd, SOMAXCONN) != 0) throw_errno("tcp: listen");
    socklen_t sl = sizeof sa;
    ::getsockname(lfd, reinterpret_cast<sockaddr*>(&sa), &sl);
    ctx.store->set_str("tcp/addr/" + std::to_string(ctx.rank),
                       tcp_local_endpoint(all_local).address + " " + std::to_string(ntohs(sa.sin_port)) + " " +
                           std::to_string(streams));
  } catch (...) {
    ::close(lfd);
    throw;
  }
  return lfd;
}

namespace {

// A socket connected to rank q at `sa` (published as `v`), retrying until
// the set-up deadline.
int connect_retrying(const WireContext& ctx, int q, const sockaddr_in& sa, const std::string& v,
                     int buf_bytes) {
  for (;;) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) throw_errno("tcp: socket");
    set_buffers_(fd, buf_bytes);
    int err = 0;
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        pollfd p{fd, POLLOUT, 0};
        int64_t left = ctx.ms_left();
        int r = left > 0 ? ::poll(&p, 1, int(std::min<int64_t>(left, 1000))) : 0;
        socklen_t el = sizeof err;
        if (r > 0) ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
        else err = ETIMEDOUT;
      }
    }
    if (err == 0) return fd;
    ::close(fd);
    if (ctx.ms_left() <= 0)
      throw Error(Errc::kTimeout, "rank " + std::to_string(ctx.rank) + ": could not connect to " +
                                      describe_peer_info(ctx.peers[size_t(q)]) + " at " + v + ": " +
                                      std::strerror(err));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Opens connection `stream` to rank q at `sa` (published as `v`): connect
// and authenticate (both retried until the set-up deadline: q closes a
// connection before its handshake while too many others are in progress,
// e.g. in a flood), then exchange hellos.
int open_stream(const WireContext& ctx, int q, const sockaddr_in& sa, const std::string& v,
                int buf_bytes, int stream) {
  const int rank_ = ctx.rank;
  const PeerInfo& pi = ctx.peers[size_t(q)];
  int fd = -1;
  for (;;) {
    fd = connect_retrying(ctx, q, sa, v, buf_bytes);
    try {
      auto left = std::chrono::milliseconds(std::max<int64_t>(ctx.ms_left(), 1));
      authenticate_connect(fd, ctx.opt->secret, left);
      break;
    } catch (const Error& e) {
      ::close(fd);
      if (e.code() != Errc::kPeerDied || ctx.ms_left() <= 0)
        throw Error(e.code(), "rank " + std::to_string(rank_) + ": connecting to " + describe_peer_info(pi) +
                                  ": " + e.what());
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  try {
    Hello h{};
    h.magic = kHelloMagic;
    h.rank = rank_;
    h.size = ctx.size;
    h.stream = stream;
    copy_token(h.token, ctx.token);
    write_full(fd, &h, sizeof h, ctx.deadline_ns, "tcp hello");
    Ack a{};
    read_full(fd, &a, sizeof a, ctx.deadline_ns, "tcp hello ack");
    if (a.magic != kHelloMagic || a.rank != q)
      throw Error(Errc::kProtocol, "tcp: the listener at " + v + " is not " + describe_peer_info(pi));
  } catch (const Error& e) {
    ::close(fd);
    throw Error(e.code(), "rank " + std::to_string(rank_) + ": connecting to " + describe_peer_info(pi) +
                              ": " + e.what());
  }
  return fd;
}

}  // namespace

std::vector<int> tcp_connect(const WireContext& ctx, int q, int buf_bytes, int streams) {
  const int rank_ = ctx.rank;
  const PeerInfo& pi = ctx.peers[size_t(q)];
  std::string key = "tcp/addr/" + std::to_string(q);
  try {
    ctx.store->wait({key}, std::chrono::milliseconds(std::max<int64_t>(ctx.ms_left(), 1)));
  } catch (const Error& e) {
    if (e.code() != Errc::kTimeout) throw;
    throw Error(Errc::kTimeout, "rank " + std::to_string(rank_) + ": TCP set-up timed out waiting for " +
                                    describe_peer_info(pi) + " to publish its address");
  }
  std::string v = ctx.store->get_str(key);
  auto sp = v.find(' ');
  std::string host = v.substr(0, sp);
  int port = sp == std::string::npos ? 0 : std::atoi(v.c_str() + sp + 1);
  auto sp2 = sp == std::string::npos ? sp : v.find(' ', sp + 1);
  const int theirs = sp2 == std::string::npos ? 1 : std::atoi(v.c_str() + sp2 + 1);
  if (theirs != streams)
    throw Error(Errc::kMismatch, "rank " + std::to_string(rank_) + " opens " + std::to_string(streams) +
                                     " TCP connections per peer (BRAID_TCP_STREAMS) but " +
                                     describe_peer_info(pi) + " opens " + std::to_string(theirs) +
                                     "; set BRAID_TCP_STREAMS alike on every rank");
  if (pi.host_id == ctx.peers[size_t(rank_)].host_id) host = "127.0.0.1";
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(uint16_t(port));
  if (port <= 0 || port > 65535 || ::inet_pton(AF_INET, host.c_str(), &sa.sin_addr) != 1)
    throw Error(Errc::kProtocol, "tcp: " + describe_peer_info(pi) + " published a bad address '" + v + "'");

  std::vector<int> fds;
  try {
    for (int k = 0; k < streams; ++k) fds.push_back(open_stream(ctx, q, sa, v, buf_bytes, k));
  } catch (...) {
    for (int fd : fds) ::close(fd);
    throw;
  }
  return fds;
}

void tcp_accept(const WireContext& ctx, int lfd, const std::vector<int>& expect, std::vector<int>& fds,
                int streams) {
  const int rank_ = ctx.rank;
  auto describe_peer = [&](int q) { return describe_peer_info(ctx.peers[size_t(q)]); };
  std::mutex mu;
  std::set<int> inflight;  // fds whose handshake thread is running
  static LogLimiter strangers;  // a flood of strangers costs a bounded log
  std::vector<std::thread> hs;
  size_t got = 0;
  auto handshake = [&](int fd, std::string from) {
    try {
      auto left = std::chrono::milliseconds(std::clamp<int64_t>(ctx.ms_left(), 1, 10000));
      authenticate_accept(fd, ctx.opt->secret, left);
      Hello h{};
      read_full(fd, &h, sizeof h, now_ns() + uint64_t(left.count()) * 1000000, "tcp hello");
      const size_t at = tcp_hello_slot(h, ctx.token, ctx.size, expect, streams);
      {
        std::lock_guard<std::mutex> g(mu);
        if (fds[at] >= 0)
          throw Error(Errc::kProtocol, "rank " + std::to_string(h.rank) + " connected twice (connection " +
                                           std::to_string(h.stream) + ")");
        Ack a{kHelloMagic, rank_};
        write_full(fd, &a, sizeof a, now_ns() + 1000000000ull, "tcp hello ack");
        fds[at] = fd;
        inflight.erase(fd);
        ++got;
      }
      return;
    } catch (const std::exception& e) {
      uint64_t more = 0;
      if (strangers.allow(&more))
        BRAID_LOG(kWarn, "rank " << rank_ << ": rejected a TCP connection from " << from << ": " << e.what()
                                 << LogLimiter::note(more));
    }
    std::lock_guard<std::mutex> g(mu);
    inflight.erase(fd);
    ::close(fd);
  };

  std::string failure;
  for (;;) {
    {
      std::lock_guard<std::mutex> g(mu);
      if (got == expect.size() * size_t(streams)) break;
    }
    if (ctx.ms_left() <= 0) {
      std::lock_guard<std::mutex> g(mu);
      std::string missing;
      for (int q : expect) {
        bool all = true;
        for (int s = 0; s < streams; ++s) all &= fds[size_t(q) * size_t(streams) + size_t(s)] >= 0;
        if (!all) missing += (missing.empty() ? "" : ", ") + describe_peer(q);
      }
      failure = "rank " + std::to_string(rank_) + ": TCP set-up timed out waiting for connections from " + missing;
      break;
    }
    pollfd p{lfd, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    sockaddr_in from{};
    socklen_t fl = sizeof from;
    int fd = ::accept4(lfd, reinterpret_cast<sockaddr*>(&from), &fl, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) continue;
    char buf[INET_ADDRSTRLEN] = "?";
    ::inet_ntop(AF_INET, &from.sin_addr, buf, sizeof buf);
    std::string who = std::string(buf) + ":" + std::to_string(ntohs(from.sin_port));
    std::lock_guard<std::mutex> g(mu);
    if (inflight.size() >= kMaxHandshakes) {
      // A flood: the real peers retry a refused connection until set-up's deadline.
      ::close(fd);
      uint64_t more = 0;
      if (strangers.allow(&more))
        BRAID_LOG(kWarn, "rank " << rank_ << ": refused a TCP connection from " << who << ": "
                                 << kMaxHandshakes << " handshakes in progress" << LogLimiter::note(more));
      continue;
    }
    inflight.insert(fd);
    hs.emplace_back(handshake, fd, who);
  }
  {
    // Unblock handshakes still running (slow or hostile connections).
    std::lock_guard<std::mutex> g(mu);
    for (int fd : inflight) ::shutdown(fd, SHUT_RDWR);
  }
  for (auto& t : hs) t.join();
  if (!failure.empty()) throw Error(Errc::kTimeout, failure);
}

}  // namespace braid::comm
