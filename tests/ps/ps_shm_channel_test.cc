// The parameter server's shared-memory rings (ps/io/shm_channel.h), the link
// over them (ps/io/link.h) and the sockets under it, inside one process: a
// socket pair is the connection (its doorbell), and a thread plays the
// other side.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>

#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include "braid/env.h"
#include "braid/error.h"
#include "ps/io/link.h"
#include "ps/io/reply_buf.h"
#include "ps/io/shm_channel.h"
#include "ps/io/socket.h"
#include "ps/io/wire.h"

namespace {

namespace ps = braid::ps;
namespace wire = braid::ps::wire;
using namespace std::chrono_literals;

struct Pair {
  int fd[2] = {-1, -1};
  std::unique_ptr<ps::ShmChannel> worker, server;
  // keep_offer: the offer stays open (for a test to map the segment too).
  explicit Pair(size_t capacity, bool keep_offer = false) {
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fd), 0);
    worker = ps::ShmChannel::create(capacity);
    server = ps::ShmChannel::attach(worker->offer());
    if (!keep_offer) worker->close_offer();
  }
  ~Pair() {
    for (int f : fd)
      if (f >= 0) ::close(f);
  }
};

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = uint8_t(seed + i * 7 + (i >> 9));
  return v;
}

TEST(PsShmChannel, OffersAreCheckedBeforeAnythingIsOpened) {
  auto ch = ps::ShmChannel::create(1);
  EXPECT_EQ(ch->capacity(), size_t(::sysconf(_SC_PAGESIZE)));
  EXPECT_TRUE(ps::ShmChannel::valid_offer(ch->offer())) << ch->offer();
  for (const char* bad : {"/etc/passwd", "1:2/../3", ":3", "3:", "1:2:3", "-1:2", "1 :2", "",
                          "12345678901234567890:1234"})
    EXPECT_FALSE(ps::ShmChannel::valid_offer(bad)) << bad;
  EXPECT_THROW(ps::ShmChannel::attach("../x"), braid::Error);
  // Files that are not a channel: this process's stdin, an fd it does not have.
  EXPECT_THROW(ps::ShmChannel::attach(std::to_string(::getpid()) + ":0"), braid::Error);
  EXPECT_THROW(ps::ShmChannel::attach(std::to_string(::getpid()) + ":999999"), braid::Error);
  // Once the offer is closed nobody can take it up.
  const std::string offer = ch->offer();
  ch->close_offer();
  EXPECT_THROW(ps::ShmChannel::attach(offer), braid::Error);
}

// Messages larger than the ring, and messages that straddle its end, arrive
// whole and in order while the writer waits for room.
TEST(PsShmChannel, BytesArriveInOrderThroughASmallRing) {
  Pair p(4096);
  ASSERT_EQ(p.worker->capacity(), p.server->capacity());
  const size_t cap = p.worker->capacity();
  const std::vector<size_t> sizes = {1, 100, cap - 7, cap, 3 * cap + 5, 1 << 20, 64};
  std::thread writer([&] {
    for (size_t i = 0; i < sizes.size(); ++i) {
      const std::vector<uint8_t> m = pattern(sizes[i], uint8_t(i));
      iovec iov[2] = {{const_cast<uint8_t*>(m.data()), m.size() / 2},
                      {const_cast<uint8_t*>(m.data()) + m.size() / 2, m.size() - m.size() / 2}};
      p.worker->write(p.fd[0], iov, 2, wire::deadline_after(20s), "test write");
    }
  });
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::vector<uint8_t> got(sizes[i]);
    size_t at = 0;
    while (at < got.size()) {
      ASSERT_TRUE(p.server->wait_readable(p.fd[1], 1, wire::deadline_after(20s), "test read"));
      const size_t k = std::min(got.size() - at, p.server->readable());
      std::memcpy(got.data() + at, p.server->peek(), k);
      p.server->consume(p.fd[1], k);
      at += k;
    }
    EXPECT_EQ(got, pattern(sizes[i], uint8_t(i))) << "message " << i;
  }
  writer.join();
  EXPECT_EQ(p.server->readable(), 0u);
}

// A span of up to the ring's capacity is contiguous wherever it starts,
// so a reader can use a frame in place across the wrap.
TEST(PsShmChannel, AFrameAcrossTheWrapIsReadInPlace) {
  Pair p(4096);
  const size_t cap = p.worker->capacity();
  ps::Link server(p.fd[1]);
  server.use_shm(std::move(p.server));
  // Each round moves the ring's start near its end with a filler, then sends
  // a frame of the ring's whole capacity, which crosses the end.
  auto filler = [&](int round) { return pattern(cap - 100 + size_t(round), 3); };
  auto frame = [&](int round) { return pattern(cap, uint8_t(round)); };
  std::thread writer([&] {
    for (int round = 0; round < 3; ++round)
      for (const std::vector<uint8_t>& m : {filler(round), frame(round)}) {
        iovec v{const_cast<uint8_t*>(m.data()), m.size()};
        p.worker->write(p.fd[0], &v, 1, wire::deadline_after(10s), "writer");
      }
  });
  for (int round = 0; round < 3; ++round) {
    std::vector<uint8_t> skip(filler(round).size());
    server.payload(skip.data(), skip.size(), wire::deadline_after(10s), "filler");
    EXPECT_EQ(skip, filler(round));
    const uint8_t* at = server.take(cap, wire::deadline_after(10s), "frame");
    EXPECT_EQ(std::memcmp(at, frame(round).data(), cap), 0) << "round " << round;
  }
  writer.join();
}

TEST(PsShmChannel, AWaitEndsAtTheDeadlineOrWhenThePeerCloses) {
  Pair p(4096);
  const int64_t t0 = int64_t(braid::now_ns());
  EXPECT_FALSE(p.server->wait_readable(p.fd[1], 1, wire::deadline_after(50ms), "idle"));
  EXPECT_GE(int64_t(braid::now_ns()) - t0, 50'000'000);
  // A frame written before the peer closes is still read; then the close shows.
  const std::vector<uint8_t> last = pattern(10, 1);
  iovec v{const_cast<uint8_t*>(last.data()), last.size()};
  p.worker->write(p.fd[0], &v, 1, wire::deadline_after(5s), "last");
  ::close(p.fd[0]);
  p.fd[0] = -1;
  EXPECT_TRUE(p.server->wait_readable(p.fd[1], 10, wire::deadline_after(5s), "last"));
  p.server->consume(p.fd[1], 10);
  try {
    p.server->wait_readable(p.fd[1], 1, wire::deadline_after(30s), "after close");
    ADD_FAILURE() << "a wait on a closed peer returned";
  } catch (const braid::Error& e) {
    EXPECT_EQ(e.code(), braid::Errc::kPeerDied);
    EXPECT_NE(std::string(e.what()).find("after close"), std::string::npos) << e.what();
  }
}

// The control page as shm_channel.cc lays it out: magic, capacity, then
// each ring's head and tail counters on 64-byte lines (ring 0 carries the
// worker's requests to the server, ring 1 the replies).
constexpr size_t kRing0Head = 64, kRing1Tail = 320 + 64;
constexpr uint64_t kChannelMagic = 0x314e484353504252ull;

// A second mapping of a channel's control page, as a peer holds it.
struct PeerView {
  uint8_t* page = nullptr;
  explicit PeerView(const std::string& offer) {
    const std::string path = "/proc/" + offer.substr(0, offer.find(':')) + "/fd/" + offer.substr(offer.find(':') + 1);
    const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    EXPECT_GE(fd, 0) << path;
    page = static_cast<uint8_t*>(::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    ::close(fd);
  }
  ~PeerView() { ::munmap(page, 4096); }
  std::atomic<uint64_t>& at(size_t off) { return *reinterpret_cast<std::atomic<uint64_t>*>(page + off); }
};

// A peer that writes nonsense into its counters gets a protocol error on
// the other side, never a read or a write outside the ring.
TEST(PsShmChannel, APeersCounterOutsideTheRingIsAProtocolError) {
  Pair p(4096, true);
  PeerView peer(p.worker->offer());
  const std::vector<uint8_t> msg = pattern(100, 3);
  iovec v{const_cast<uint8_t*>(msg.data()), msg.size()};
  p.worker->write(p.fd[0], &v, 1, wire::deadline_after(5s), "request");
  ASSERT_EQ(p.server->readable(), 100u);
  for (uint64_t bad : {uint64_t(100) + 2 * 4096, uint64_t(0) - 1}) {  // a ring ahead; behind the reader
    peer.at(kRing0Head).store(bad);
    try {
      (void)p.server->readable();
      ADD_FAILURE() << "a write counter of " << bad << " was taken";
    } catch (const braid::Error& e) {
      EXPECT_EQ(e.code(), braid::Errc::kProtocol);
      EXPECT_NE(std::string(e.what()).find("outside the ring"), std::string::npos) << e.what();
    }
    EXPECT_THROW(p.server->wait_readable(p.fd[1], 1, wire::deadline_after(1s), "request"), braid::Error);
  }
  // The server's replies: a read counter ahead of what it wrote.
  peer.at(kRing1Tail).store(uint64_t(1) << 40);
  std::vector<uint8_t> reply(10, 1);
  iovec r{reply.data(), reply.size()};
  try {
    p.server->write(p.fd[1], &r, 1, wire::deadline_after(1s), "reply");
    ADD_FAILURE() << "a write against a read counter outside the ring went ahead";
  } catch (const braid::Error& e) {
    EXPECT_EQ(e.code(), braid::Errc::kProtocol) << e.what();
  }
  size_t room = 0;
  EXPECT_THROW(p.server->write_area(&room), braid::Error);
}

// A server maps only a segment sealed against shrinking: a peer could
// otherwise truncate it under the server's mappings (SIGBUS on its next
// read).
TEST(PsShmChannel, AnUnsealedSegmentIsRefused) {
  const size_t pg = size_t(::sysconf(_SC_PAGESIZE));
  const int fd = ::memfd_create("not-sealed", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, off_t(pg + 2 * pg)), 0);
  const uint64_t head[2] = {kChannelMagic, pg};
  ASSERT_EQ(::pwrite(fd, head, sizeof head, 0), ssize_t(sizeof head));
  try {
    ps::ShmChannel::attach(std::to_string(::getpid()) + ":" + std::to_string(fd));
    ADD_FAILURE() << "an unsealed segment was attached";
  } catch (const braid::Error& e) {
    EXPECT_EQ(e.code(), braid::Errc::kProtocol) << e.what();
  }
  // The same file sealed is a channel.
  ASSERT_EQ(::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK), -1) << "memfd without MFD_ALLOW_SEALING took a seal";
  ::close(fd);
  auto ok = ps::ShmChannel::create(1);
  EXPECT_NO_THROW(ps::ShmChannel::attach(ok->offer()));
}

TEST(PsShmChannel, AWriterBlockedOnAFullRingLearnsThePeerClosed) {
  Pair p(4096);
  std::thread closer([&] {
    std::this_thread::sleep_for(50ms);
    ::shutdown(p.fd[1], SHUT_RDWR);
  });
  const std::vector<uint8_t> big = pattern(4 * p.worker->capacity(), 2);
  iovec v{const_cast<uint8_t*>(big.data()), big.size()};
  try {
    p.worker->write(p.fd[0], &v, 1, wire::deadline_after(30s), "blocked write");
    ADD_FAILURE() << "a write into a ring nobody reads returned";
  } catch (const braid::Error& e) {
    EXPECT_EQ(e.code(), braid::Errc::kPeerDied) << e.what();
  }
  closer.join();
}

// Frames between two links, as a worker and a server exchange them.
TEST(PsShmChannel, LinksCarryFramesBothWays) {
  Pair p(8192);
  ps::Link worker(p.fd[0]), server(p.fd[1]);
  worker.use_shm(std::move(p.worker));
  server.use_shm(std::move(p.server));
  EXPECT_EQ(server.in_place_max(1), 8192u);
  std::vector<float> grad(3000);
  std::iota(grad.begin(), grad.end(), 0.5f);
  wire::Header h;
  h.op = wire::kPush;
  h.req = 9;
  h.payload = grad.size() * 4;  // bigger than the ring
  std::thread t([&] { worker.send(h, grad.data(), wire::deadline_after(10s), "push"); });
  const wire::Header got = server.header(wire::deadline_after(10s), "push");
  EXPECT_EQ(got.req, 9u);
  std::vector<float> in(grad.size());
  server.payload(in.data(), got.payload, wire::deadline_after(10s), "push");
  t.join();
  EXPECT_EQ(in, grad);
  wire::Header r = got;
  r.op = wire::kPush | wire::kReply;
  r.payload = 8;
  const double two[1] = {2.5};
  server.send(r, two, wire::deadline_after(10s), "reply");
  const wire::Header back = worker.header(wire::deadline_after(10s), "reply");
  EXPECT_EQ(back.op, wire::kPush | wire::kReply);
  double v = 0;
  std::memcpy(&v, worker.take(8, wire::deadline_after(10s), "reply"), 8);
  EXPECT_EQ(v, 2.5);
  // A frame with a bad magic is refused as on TCP.
  wire::Header junk;
  junk.magic = 7;
  iovec j{&junk, sizeof junk};
  std::vector<iovec> jv{j};
  server.send_gather(jv, wire::deadline_after(10s), "junk");
  try {
    worker.header(wire::deadline_after(10s), "junk");
    ADD_FAILURE() << "a bad magic was accepted";
  } catch (const braid::Error& e) {
    EXPECT_EQ(e.code(), braid::Errc::kProtocol);
  }
}

// A reply built in a placed area stays there while it fits, and moves to
// its own memory, bytes intact, once it outgrows the area.
TEST(PsShmChannel, AReplyOutgrowingItsPlaceMovesWithItsBytes) {
  uint8_t area[16] = {};
  ps::ReplyBuf out;
  out.place(area, sizeof area);
  const uint8_t a[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  out.append(a, 8);
  EXPECT_TRUE(out.placed());
  EXPECT_EQ(out.data(), area);
  EXPECT_EQ(std::memcmp(area, a, 8), 0);
  out.append(a, 8);
  out.append(a, 1);  // 17 bytes: past the area
  EXPECT_FALSE(out.placed());
  ASSERT_EQ(out.size(), 17u);
  EXPECT_EQ(std::memcmp(out.data(), a, 8), 0);
  EXPECT_EQ(std::memcmp(out.data() + 8, a, 8), 0);
  EXPECT_EQ(out.data()[16], 1);
  out.clear();
  EXPECT_EQ(out.size(), 0u);
}

// On the rings, a reply built in place is sent without a copy.
TEST(PsShmChannel, APlacedReplyArrivesAsBuilt) {
  Pair p(8192);
  ps::Link worker(p.fd[0]), server(p.fd[1]);
  worker.use_shm(std::move(p.worker));
  server.use_shm(std::move(p.server));
  for (int round = 0; round < 4; ++round) {  // the later rounds cross the ring's end
    size_t room = 0;
    uint8_t* area = server.reply_area(&room);
    ASSERT_NE(area, nullptr);
    EXPECT_EQ(room, 8192 - sizeof(wire::Header));
    ps::ReplyBuf out;
    out.place(area, room);
    const std::vector<uint8_t> body = pattern(3000, uint8_t(round));
    out.append(body.data(), body.size());
    ASSERT_TRUE(out.placed());
    wire::Header r;
    r.op = wire::kPull | wire::kReply;
    r.req = uint64_t(round);
    r.payload = out.size();
    server.send_placed(r, "placed");
    const wire::Header got = worker.header(wire::deadline_after(5s), "placed");
    EXPECT_EQ(got.req, uint64_t(round));
    ASSERT_EQ(got.payload, body.size());
    EXPECT_EQ(std::memcmp(worker.take(body.size(), wire::deadline_after(5s), "placed"), body.data(),
                          body.size()),
              0);
    worker.arrived("free");  // frees the taken bytes: the ring is empty again
  }
}

// The sockets under every link (TCP frames, or a ring's wake-ups) notice a
// vanished host by themselves: keepalive and a user timeout on both ends.
TEST(PsSocket, BothEndsProbeAVanishedPeer) {
  int port = 0;
  const int lfd = ps::listen_tcp("127.0.0.1", &port);
  const int c = ps::connect_tcp("127.0.0.1", port, 10s, "test");
  int a = -1;
  for (int i = 0; i < 100 && a < 0; ++i) {
    if (ps::wait_readable(lfd, 100)) a = ps::accept_tcp(lfd);
  }
  ASSERT_GE(a, 0);
  for (int fd : {a, c}) {
    auto opt = [&](int level, int name) {
      int v = -1;
      socklen_t len = sizeof v;
      EXPECT_EQ(::getsockopt(fd, level, name, &v, &len), 0);
      return v;
    };
    EXPECT_EQ(opt(SOL_SOCKET, SO_KEEPALIVE), 1);
    EXPECT_EQ(opt(IPPROTO_TCP, TCP_NODELAY), 1);
    EXPECT_EQ(opt(IPPROTO_TCP, TCP_KEEPIDLE), 5);
    EXPECT_EQ(opt(IPPROTO_TCP, TCP_KEEPINTVL), 1);
    EXPECT_EQ(opt(IPPROTO_TCP, TCP_KEEPCNT), 5);
    EXPECT_EQ(opt(IPPROTO_TCP, TCP_USER_TIMEOUT), 10000);
    ::close(fd);
  }
  ::close(lfd);
}

}  // namespace
