// ps::Server: a listening socket, an accept thread, and one thread per
// connection. A connection's thread proves the job secret, reads the hello
// and hands the connection to the handler of the role it names
// (connection.cc), which reads one frame at a time, checks its shape
// against the server's keys before reading the payload, and runs it on the
// ShardState (which may park it, e.g. a BSP pull waiting for its round). Why a thread per connection: a
// parked or stalled client then holds only its own thread, so one bad or
// slow worker never delays another's requests; the worker count of a job
// is small. Any error ends that connection only, after an error reply.
//
// Chains (ps/replication/chain.h): the server keeps one ShardState per
// shard whose chain it is in; a connection's hello names the shard. A write is applied
// and forwarded to the live successor under the shard's forwarding mutex,
// and answered only after the successor's ack, which the successor sends
// after its own successor's: an ack therefore means the write is applied on
// every live member. Holding the mutex over the round trip keeps one write
// per shard in flight, so members apply writes in the head's order and a
// member that loses its successor re-sends just that one write to the next
// live member (which drops it if it has it: request ids,
// ps/replication/write_dedup.h). The same mutex pauses a shard's writes
// while its tail hands the shard to a joining server (chain_join.h).
#include <sys/socket.h>
#include <unistd.h>

#include "braid/host.h"
#include "braid/log.h"
#include "comm/store/auth.h"
#include "comm/transport/peer_info.h"
#include "ps/replication/chain_join.h"
#include "ps/io/link.h"
#include "ps/server/connection.h"
#include "ps/server/server_impl.h"
#include "ps/server_name.h"
#include "ps/io/socket.h"

namespace braid::ps {

namespace {
constexpr auto kHandshakeTimeout = std::chrono::seconds(10);
}  // namespace

// Server::Impl: ps/server/server_impl.h.

void Server::Impl::accept_loop() {
  while (!stopping) {
    check_lost();
    if (!wait_readable(listen_fd, kPollMs)) continue;
    int fd = accept_tcp(listen_fd);
    if (fd < 0) continue;
    std::lock_guard<std::mutex> lk(mu);
    if (stopping) {
      ::close(fd);
      break;
    }
    reap_locked();
    if (proving_locked() >= kMaxProving) {
      ::close(fd);
      uint64_t more = 0;
      if (stranger_log.allow(&more))
        BRAID_LOG(kInfo, server_name(opt.rank) << ": dropped a connection: " << kMaxProving
                                               << " are still proving the secret"
                                               << LogLimiter::note(more));
      continue;
    }
    Conn& c = conns.emplace_back();
    c.fd = fd;
    c.thread = std::thread([this, &c] {
      serve(c);
      c.done = true;
    });
  }
}

void Server::Impl::reap_locked() {
  for (auto it = conns.begin(); it != conns.end();) {
    if (!it->done) {
      ++it;
      continue;
    }
    it->thread.join();
    ::close(it->fd);
    it = conns.erase(it);
  }
}

size_t Server::Impl::proving_locked() const {
  size_t n = 0;
  for (const Conn& c : conns) n += c.proving;
  return n;
}

void Server::Impl::reject(Link& link, ShardState& st, const wire::Header& h, const Error& e) {
  std::string msg;
  wire::Header r = wire::error_reply(h, e, &msg);
  try {
    link.send(r, msg.data(), wire::deadline_after(std::chrono::seconds(1)),
              "parameter server: error reply");
  } catch (const Error&) {
    // The client is gone or not reading: it is dropped either way.
  }
  st.count_traffic(sizeof h, sizeof r + msg.size(), true);
}

Server::Impl::Shard& Server::Impl::hello(const wire::Header& h) {
  const std::string name = server_name(opt.rank);
  if (h.op != wire::kHello)
    throw Error(Errc::kInvalidArgument, name + ": the first frame must be hello");
  auto it = shards.find(int(h.key));
  if (it == shards.end())
    throw Error(Errc::kInvalidArgument, name + ": hello for shard " + std::to_string(h.key) +
                                            ", which this server does not keep");
  return *it->second;
}

// A worker's write must reach the shard's head and its read the tail, in a
// configuration at least as new as the one the worker routed by.
void Server::Impl::check_role(const Shard& sh, const wire::Header& h, bool chain_conn) {
  const bool write = wire::is_write(h.op);
  if (chain_conn) {
    if (!write)
      throw Error(Errc::kProtocol,
                  server_name(opt.rank) + ": a chain connection carries only writes");
    return;
  }
  // A read routed by a view older than this server's may reach a former tail
  // (a join appended a new one): it still holds every acknowledged write,
  // as acks pass through it, so it serves the read; the reply's newer epoch
  // moves the worker to the new tail.
  auto role_ok = [&] {
    return (write ? view.head(sh.id) : view.tail(sh.id)) == opt.rank ||
           (!write && h.epoch < view.epoch() && view.member(sh.id, opt.rank));
  };
  if (h.epoch > view.epoch() || !role_ok()) view.refresh();
  if (!role_ok())
    throw Error(Errc::kInvalidArgument,
                server_name(opt.rank) + ": not the " + (write ? "head" : "tail") + " of shard " +
                    std::to_string(sh.id) + " in chain epoch " + std::to_string(view.epoch()));
  sh.state->set_epoch(view.epoch());
}

int Server::Impl::connect_successor(int succ, int shard, int64_t deadline) {
  return connect_peer(*store, opt, succ, shard, wire::kChain, deadline,
                      server_name(opt.rank) + ", shard " + std::to_string(shard) + ": successor " +
                          std::to_string(succ));
}

void Server::Impl::forward(Shard& sh, const wire::Header& h, const uint8_t* payload,
                           int64_t deadline) {
  for (;;) {
    const int succ = view.successor(sh.id, opt.rank);
    if (succ != sh.next && sh.next_fd >= 0) {
      ::close(sh.next_fd);
      sh.next_fd = -1;
    }
    sh.next = succ;
    if (succ < 0) return;  // the tail: applied on every live member
    const std::string what = server_name(opt.rank) + ", shard " + std::to_string(sh.id) +
                             ": forwarding to " + std::to_string(succ);
    try {
      if (sh.next_fd < 0) sh.next_fd = connect_successor(succ, sh.id, deadline);
      wire::Header f = h;
      f.epoch = view.epoch();
      wire::send_frame(sh.next_fd, f, payload, deadline, what.c_str());
      wire::Header r = wire::recv_header(sh.next_fd, deadline, what.c_str());
      if (r.op != (h.op | wire::kReply) || r.req != h.req)
        throw Error(Errc::kProtocol, what + ": ack out of order");
      if (r.status != 0) {
        std::string msg(std::min<uint64_t>(r.payload, wire::kMaxMessage), '\0');
        wire::recv_payload(sh.next_fd, msg.data(), msg.size(), deadline, what.c_str());
        wire::throw_reply(r, msg, what);
      }
      return;
    } catch (const Error& e) {
      if (!connection_lost(e)) throw;
      BRAID_LOG(kInfo, what << ": successor lost (" << e.what() << "); declaring it dead");
      if (sh.next_fd >= 0) ::close(sh.next_fd);
      sh.next_fd = -1;
      view.declare_dead(succ);
    }
  }
}

std::unique_ptr<ShmChannel> Server::Impl::accept_shm(Link& link, const wire::Header& h,
                                                      int64_t deadline) {
  const std::string name = server_name(opt.rank);
  if (!(h.flags & wire::kShm)) {
    if (h.payload)
      throw Error(Errc::kProtocol, name + ": a hello carries a payload only to offer shared memory");
    return nullptr;
  }
  if (h.payload == 0 || h.payload > 64)
    throw Error(Errc::kProtocol, name + ": a shared-memory offer of " + std::to_string(h.payload) +
                                     " bytes (an offer is 1..64)");
  const uint8_t* p = link.take(h.payload, deadline, "parameter server: hello");
  const std::string offer(reinterpret_cast<const char*>(p), h.payload);
  if (!ShmChannel::valid_offer(offer))
    throw Error(Errc::kProtocol, name + ": '" + offer + "' is not a shared-memory offer");
  try {
    return ShmChannel::attach(offer);
  } catch (const Error& e) {  // e.g. no access to the worker's /proc: the connection stays on TCP
    BRAID_LOG(kInfo, name << ": worker " << h.worker << " stays on TCP: " << e.what());
    return nullptr;
  }
}

void Server::Impl::serve(Conn& conn) {
  const int fd = conn.fd;
  const std::string name = server_name(opt.rank);
  try {
    comm::authenticate_accept(fd, opt.secret, kHandshakeTimeout);
    conn.proving = false;
  } catch (const Error& e) {
    own().count_traffic(0, 0, true);
    uint64_t more = 0;
    if (stranger_log.allow(&more))
      BRAID_LOG(kInfo, name << ": dropped a connection that failed authentication: " << e.what()
                            << LogLimiter::note(more));
    ::shutdown(fd, SHUT_RDWR);
    conn.proving = false;
    return;
  }
  Connection c(fd, kPollMs);
  set_recv_timeout(fd, kPollMs);
  // The hello names the shard and the role; its handler answers it and
  // serves the connection's frames until it ends.
  wire::Header h{};
  if (next_frame(c, h, own())) {
    Shard* sh = nullptr;
    try {
      sh = &hello(h);
    } catch (const Error& e) {
      BRAID_LOG(kInfo, name << ": dropping worker " << c.worker << ": " << e.what());
      reject(c.link, own(), h, e);
    }
    if (!sh) {
    } else if (h.flags & wire::kJoinConn) {
      serve_join(c, h, *sh);
    } else if (h.flags & wire::kHot) {
      serve_hot_peer(c, h, *sh);
    } else if (h.flags & wire::kChain) {
      serve_chain(c, h, *sh);
    } else {
      serve_worker(c, h, *sh);
    }
  }
  ::shutdown(fd, SHUT_RDWR);
}

Server::Server(const Layout& layout, const ServerOptions& opt, std::shared_ptr<Store> store,
               const std::vector<std::vector<float>>& init,
               std::function<void(KeyId, int64_t, float*)> init_sparse)
    : impl_(std::make_unique<Impl>(layout, opt, store, init, std::move(init_sparse))) {
  const std::string host =
      opt.bind_host.empty() ? comm::tcp_local_endpoint(false).address : opt.bind_host;
  impl_->listen_fd = listen_tcp(host, &impl_->port);
  impl_->acceptor = std::thread([this] { impl_->accept_loop(); });
  // From here a throw must stop the acceptor first (a joinable thread's
  // destructor would end the process).
  try {
    // Before the address, which workers wait for: with it they tell
    // whether they share this host (link.h).
    store->set_str("ps/host/" + std::to_string(opt.rank), comm::host_identity());
    store->set_str("ps/server/" + std::to_string(opt.rank),
                   host + ":" + std::to_string(impl_->port));
    // Listening first: a shard's old tail forwards writes here once it
    // has recorded the join.
    for (int s : opt.join)
      impl_->joins.push_back(join_chain(s, *impl_->shards.at(s)->state, impl_->view, *store, opt));
  } catch (...) {
    impl_->shutdown();
    throw;
  }
}

void Server::Impl::shutdown() {
  stopping = true;
  for (auto& [id, sh] : shards) sh->state->stop();
  if (replicas) replicas->stop();
  if (acceptor.joinable()) acceptor.join();
  std::list<Impl::Conn> cs;
  {
    std::lock_guard<std::mutex> lk(mu);
    cs.swap(conns);
  }
  for (auto& c : cs) ::shutdown(c.fd, SHUT_RDWR);
  for (auto& c : cs) {
    if (c.thread.joinable()) c.thread.join();
    ::close(c.fd);
  }
  for (auto& [id, sh] : shards)
    if (sh->next_fd >= 0) ::close(sh->next_fd);
  ::close(listen_fd);
}

Server::~Server() { impl_->shutdown(); }

int Server::port() const { return impl_->port; }
ServerStats Server::stats() const { return impl_->own().stats(); }
ServerStats Server::shard_stats(int shard) const {
  auto it = impl_->shards.find(shard);
  BRAID_CHECK_ARG(
      it != impl_->shards.end(),
      server_name(impl_->opt.rank) + " keeps no replica of shard " + std::to_string(shard));
  return it->second->state->stats();
}
std::vector<int> Server::shards() const {
  std::vector<int> out;
  for (const auto& [id, sh] : impl_->shards) out.push_back(id);
  return out;
}

void Server::save_state(int shard, const std::string& path) const {
  auto it = impl_->shards.find(shard);
  BRAID_CHECK_ARG(
      it != impl_->shards.end(),
      server_name(impl_->opt.rank) + " keeps no replica of shard " + std::to_string(shard));
  it->second->state->transfer_out(path);
}

std::vector<JoinReport> Server::joins() const { return impl_->joins; }

void Server::wait_finished(std::chrono::milliseconds timeout) {
  for (auto& [id, sh] : impl_->shards) sh->state->wait_finished(timeout);
}

void Server::fail(const std::string& why) {
  for (auto& [id, sh] : impl_->shards) sh->state->fail(why);
}

}  // namespace braid::ps
