// ps::Server: a listening socket, an accept thread, and one thread per
// connection. A connection's thread proves the job secret, then reads one
// frame at a time, checks its shape against the server's keys before
// reading the payload, and runs it on the ShardState (which may park it,
// e.g. a BSP pull waiting for its round). Why a thread per connection: a
// parked or stalled client then holds only its own thread, so one bad or
// slow worker never delays another's requests; the worker count of a job
// is small. Any error ends that connection only, after an error reply.
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <list>
#include <mutex>
#include <thread>

#include "braid/log.h"
#include "comm/store/auth.h"
#include "ps/shard_state.h"
#include "ps/socket.h"

namespace braid::ps {

namespace {
constexpr auto kHandshakeTimeout = std::chrono::seconds(10);
constexpr int kPollMs = 100;
}  // namespace

struct Server::Impl {
  ServerOptions opt;
  ShardState state;
  int listen_fd = -1;
  int port = 0;
  std::atomic<bool> stopping{false};
  std::thread acceptor;
  std::mutex mu;
  struct Conn {
    int fd = -1;
    std::thread thread;
  };
  std::list<Conn> conns;

  Impl(const Layout& layout, const ServerOptions& o, const std::vector<std::vector<float>>& init,
       std::function<void(KeyId, int64_t, float*)> init_sparse)
      : opt(o), state(layout, o, init, std::move(init_sparse)) {}

  void accept_loop();
  void serve(int fd);
  void reject(int fd, const wire::Header& h, const Error& e);
};

void Server::Impl::accept_loop() {
  while (!stopping) {
    if (!wait_readable(listen_fd, kPollMs)) continue;
    int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    std::lock_guard<std::mutex> lk(mu);
    if (stopping) {
      ::close(fd);
      break;
    }
    conns.push_back({fd, {}});
    conns.back().thread = std::thread([this, fd] { serve(fd); });
  }
}

void Server::Impl::reject(int fd, const wire::Header& h, const Error& e) {
  std::string msg;
  wire::Header r = wire::error_reply(h, e, &msg);
  try {
    wire::send_frame(fd, r, msg.data(), wire::deadline_after(std::chrono::seconds(1)),
                     "parameter server: error reply");
  } catch (const Error&) {
    // The client is gone or not reading: it is dropped either way.
  }
  state.count_traffic(sizeof h, sizeof r + msg.size(), true);
}

void Server::Impl::serve(int fd) {
  const std::string name = "parameter server " + std::to_string(opt.rank);
  try {
    comm::authenticate_accept(fd, opt.secret, kHandshakeTimeout);
  } catch (const Error& e) {
    state.count_traffic(0, 0, true);
    BRAID_LOG(kInfo, name << ": dropped a connection that failed authentication: " << e.what());
    ::shutdown(fd, SHUT_RDWR);
    return;
  }
  int worker = -1;
  std::vector<uint8_t> in, out;
  while (!stopping) {
    if (!wait_readable(fd, kPollMs)) continue;
    wire::Header h{};
    try {
      h = wire::recv_header(fd, wire::deadline_after(opt.timeout), "parameter server: request");
    } catch (const Error& e) {
      if (e.code() != Errc::kPeerDied) reject(fd, h, e);  // garbage, or a stalled header
      break;
    }
    const int64_t deadline = wire::deadline_after(opt.timeout);
    wire::Header reply{};
    try {
      const uint64_t n = state.expected_payload(h, worker);
      in.resize(n);
      wire::recv_payload(fd, in.data(), n, deadline, "parameter server: request payload");
      if (h.op == wire::kHello) {
        state.attach(int(h.worker));
        worker = int(h.worker);
      }
      state.handle(h, in.data(), reply, out, deadline);
    } catch (const Error& e) {
      BRAID_LOG(kInfo, name << ": dropping worker " << worker << ": " << e.what());
      reject(fd, h, e);
      break;
    }
    try {
      wire::send_frame(fd, reply, out.data(), deadline, "parameter server: reply");
    } catch (const Error&) {
      break;  // the worker went away; its id is released below
    }
    state.count_traffic(sizeof h + h.payload, sizeof reply + reply.payload, false);
  }
  if (worker >= 0) state.detach(worker);
  ::shutdown(fd, SHUT_RDWR);
}

Server::Server(const Layout& layout, const ServerOptions& opt, std::shared_ptr<Store> store,
               const std::vector<std::vector<float>>& init,
               std::function<void(KeyId, int64_t, float*)> init_sparse)
    : impl_(std::make_unique<Impl>(layout, opt, init, std::move(init_sparse))) {
  BRAID_CHECK_ARG(store != nullptr, "a parameter server needs the job's store");
  impl_->listen_fd = listen_tcp(opt.bind_host, &impl_->port);
  impl_->acceptor = std::thread([this] { impl_->accept_loop(); });
  store->set_str("ps/server/" + std::to_string(opt.rank),
                 opt.bind_host + ":" + std::to_string(impl_->port));
}

Server::~Server() {
  impl_->stopping = true;
  impl_->state.stop();
  if (impl_->acceptor.joinable()) impl_->acceptor.join();
  std::list<Impl::Conn> conns;
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    conns.swap(impl_->conns);
  }
  for (auto& c : conns) ::shutdown(c.fd, SHUT_RDWR);
  for (auto& c : conns) {
    if (c.thread.joinable()) c.thread.join();
    ::close(c.fd);
  }
  ::close(impl_->listen_fd);
}

int Server::port() const { return impl_->port; }
ServerStats Server::stats() const { return impl_->state.stats(); }
void Server::wait_finished(std::chrono::milliseconds timeout) {
  impl_->state.wait_finished(timeout);
}

}  // namespace braid::ps
