#include "ps/hot/hot_sender.h"

#include <unistd.h>

#include "braid/log.h"
#include "comm/store/auth.h"
#include "ps/server_name.h"
#include "ps/io/socket.h"
#include "ps/io/wire.h"

namespace braid::ps {

namespace {
constexpr auto kHandshakeTimeout = std::chrono::seconds(10);
// A live peer accepts at once (its address is in the store only once it
// listens); a refused connection past this is a dead one.
constexpr auto kPeerConnect = std::chrono::seconds(3);

// Reads a reply to `req`; throws the error it carries.
void expect_ack(int fd, const wire::Header& req, int64_t deadline, const std::string& what) {
  wire::Header r = wire::recv_header(fd, deadline, what.c_str());
  if (r.op != (req.op | wire::kReply) || r.req != req.req)
    throw Error(Errc::kProtocol, what + ": ack out of order");
  if (r.status != 0) {
    std::string msg(std::min<uint64_t>(r.payload, wire::kMaxMessage), '\0');
    wire::recv_payload(fd, msg.data(), msg.size(), deadline, what.c_str());
    wire::throw_reply(r, msg, what);
  }
}
}  // namespace

int connect_peer(Store& store, const ServerOptions& opt, int peer, int shard, uint16_t flags,
                 int64_t deadline, const std::string& what) {
  const std::string key = "ps/server/" + std::to_string(peer);
  store.wait({key}, opt.timeout);
  const std::string addr = store.get_str(key);
  const size_t colon = addr.rfind(':');
  int fd = -1;
  try {
    fd = connect_tcp(addr.substr(0, colon), std::atoi(addr.c_str() + colon + 1), kPeerConnect,
                     what);
  } catch (const Error& e) {
    if (e.code() == Errc::kTimeout) throw Error(Errc::kPeerDied, e.what());
    throw;
  }
  try {
    comm::authenticate_connect(fd, opt.secret, kHandshakeTimeout);
    wire::Header h;
    h.op = wire::kHello;
    h.flags = flags;
    h.key = uint32_t(shard);
    wire::send_frame(fd, h, nullptr, deadline, what.c_str());
    expect_ack(fd, h, deadline, what);
  } catch (...) {
    ::close(fd);
    throw;
  }
  return fd;
}

HotSender::HotSender(const ServerOptions& opt, int servers, std::shared_ptr<Store> store)
    : opt_(opt), servers_(servers), store_(std::move(store)),
      fds_(size_t(servers), -1), failed_(size_t(servers), false) {
  thread_ = std::thread([this] { loop(); });
}

HotSender::~HotSender() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
    cv_.notify_all();
  }
  thread_.join();
  for (int fd : fds_)
    if (fd >= 0) ::close(fd);
}

void HotSender::enqueue(int64_t round, uint64_t rows, std::vector<uint8_t> payload) {
  std::lock_guard<std::mutex> lk(mu_);
  queue_.push_back({round, rows, std::move(payload)});
  cv_.notify_all();
}

void HotSender::loop() {
  for (;;) {
    Item it;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      it = std::move(queue_.front());
      queue_.pop_front();
    }
    send(it);
  }
}

void HotSender::send(const Item& it) {
  uint64_t req = 0;
  for (int p = 0; p < servers_; ++p) {
    if (p == opt_.rank || failed_[size_t(p)]) continue;
    const std::string what =
        server_name(opt_.rank) + ": hot-key refresh to server " + std::to_string(p);
    const int64_t deadline = wire::deadline_after(opt_.timeout);
    try {
      if (fds_[size_t(p)] < 0)
        fds_[size_t(p)] = connect_peer(*store_, opt_, p, p, wire::kHot, deadline, what);
      wire::Header h;
      h.op = wire::kHotPush;
      h.req = ++req;
      h.key = uint32_t(opt_.rank);
      h.clock = it.round;
      h.count = it.rows;
      h.payload = it.payload.size();
      wire::send_frame(fds_[size_t(p)], h, it.payload.data(), deadline, what.c_str());
      expect_ack(fds_[size_t(p)], h, deadline, what);
    } catch (const Error& e) {
      // Its copies stay at the last refresh; pulls needing a newer one time
      // out there with an error naming this shard.
      BRAID_LOG(kWarn, what << " failed; no more refreshes go there: " << e.what());
      failed_[size_t(p)] = true;
      if (fds_[size_t(p)] >= 0) ::close(fds_[size_t(p)]);
      fds_[size_t(p)] = -1;
    }
  }
}

}  // namespace braid::ps
