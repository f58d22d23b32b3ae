// ps::Server: a listening socket, an accept thread, and one thread per
// connection. A connection's thread proves the job secret, then reads one
// frame at a time, checks its shape against the server's keys before
// reading the payload, and runs it on the ShardState (which may park it,
// e.g. a BSP pull waiting for its round). Why a thread per connection: a
// parked or stalled client then holds only its own thread, so one bad or
// slow worker never delays another's requests; the worker count of a job
// is small. Any error ends that connection only, after an error reply.
//
// Chains (ps/chain.h): the server keeps one ShardState per shard whose
// chain it is in; a connection's hello names the shard. A write is applied
// and forwarded to the live successor under the shard's forwarding mutex,
// and answered only after the successor's ack, which the successor sends
// after its own successor's: an ack therefore means the write is applied on
// every live member. Holding the mutex over the round trip keeps one write
// per shard in flight, so members apply writes in the head's order and a
// member that loses its successor re-sends just that one write to the next
// live member (which drops it if it has it: request ids, shard_state.h).
// The same mutex pauses a shard's writes while its tail hands the shard to
// a joining server (chain_join.h).
#include <sys/socket.h>
#include <unistd.h>

#include "braid/host.h"
#include "braid/log.h"
#include "comm/store/auth.h"
#include "comm/transport/peer_info.h"
#include "ps/chain_join.h"
#include "ps/link.h"
#include "ps/server_impl.h"
#include "ps/server_name.h"
#include "ps/socket.h"

namespace braid::ps {

namespace {
constexpr auto kHandshakeTimeout = std::chrono::seconds(10);
constexpr int kPollMs = 100;
// A request payload up to this is used where the connection's reader
// buffered it (it stays put until the next read); a larger one is read into
// a vector of its own, so the reader's buffer never grows past it.
constexpr uint64_t kInPlace = uint64_t(256) << 10;

bool connection_lost(const Error& e) {
  return e.code() == Errc::kPeerDied || e.code() == Errc::kIo;
}
}  // namespace

// Server::Impl: ps/server_impl.h.

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
    conns.push_back({fd, {}});
    conns.back().thread = std::thread([this, fd] { serve(fd); });
  }
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

void Server::Impl::serve(int fd) {
  const std::string name = server_name(opt.rank);
  try {
    comm::authenticate_accept(fd, opt.secret, kHandshakeTimeout);
  } catch (const Error& e) {
    own().count_traffic(0, 0, true);
    BRAID_LOG(kInfo, name << ": dropped a connection that failed authentication: " << e.what());
    ::shutdown(fd, SHUT_RDWR);
    return;
  }
  int worker = -1;
  bool gone = false;  // the worker's end closed, not this server (ShardState::detach)
  Shard* sh = nullptr;
  bool chain_conn = false, hot_conn = false, join_conn = false, joined = false;
  std::vector<uint8_t> in;
  ReplyBuf out;  // on a shared-memory link, placed in the outgoing ring (reply_buf.h)
  // Requests are read through `link` (link.h, frame_reader.h): one recv
  // waits for a request (up to kPollMs, then `stopping` is checked) and
  // takes it with whatever the worker queued behind it; a request already
  // buffered is served without touching the socket. After a hello that
  // moves the connection to shared memory (`moving`), frames are read
  // where they lie in the ring.
  Link link(fd, kPollMs);
  std::unique_ptr<ShmChannel> moving;
  set_recv_timeout(fd, kPollMs);
  while (!stopping) {
    ShardState& st = sh ? *sh->state : own();
    wire::Header h{};
    try {
      if (!link.arrived("parameter server: request")) continue;
      h = link.header(wire::deadline_after(opt.timeout), "parameter server: request");
    } catch (const Error& e) {
      gone = e.code() == Errc::kPeerDied;
      if (!gone) reject(link, st, h, e);  // garbage, or a stalled header
      break;
    }
    const int64_t deadline = wire::deadline_after(opt.timeout);
    wire::Header reply{};
    size_t room = 0;
    if (uint8_t* area = link.reply_area(&room)) out.place(area, room);
    ShardState* target = &st;
    try {
      if (!sh) {
        Shard& s = hello(h);
        target = s.state.get();
        chain_conn = (h.flags & wire::kChain) != 0;
        hot_conn = (h.flags & wire::kHot) != 0;
        join_conn = (h.flags & wire::kJoinConn) != 0;
        if (!chain_conn && !hot_conn && !join_conn) {
          s.state->expected_payload(h, -1);
          s.state->attach(int(h.worker));
          worker = int(h.worker);
        } else if (h.payload) {
          throw Error(Errc::kProtocol, name + ": a server's hello carries no payload");
        }
        sh = &s;  // before anything else may throw: the worker is detached through it
        if (worker >= 0) moving = accept_shm(link, h, deadline);
        reply = h;
        reply.op = uint16_t(h.op | wire::kReply);
        reply.flags = uint16_t(h.flags & ~wire::kShm);  // set below once the reply is due
        reply.payload = 0;
        out.clear();
      } else if (join_conn || h.op == wire::kJoin) {
        if (!join_conn || h.op != wire::kJoin || h.key != uint32_t(sh->id))
          throw Error(Errc::kProtocol,
                      name + ": a join connection carries only a join of its hello's shard");
        if (link.buffered())  // the join's exchange reads the connection itself
          throw Error(Errc::kProtocol, name + ": bytes after a join request, before its reply");
        send_shard_state(fd, h, *sh->state, sh->fwd_mu, view, opt.rank, deadline);
        joined = true;  // the whole exchange is done: close the connection
      } else if (h.op == wire::kHotPush || h.op == wire::kHotPull || h.op == wire::kHotSet) {
        serve_hot(link, h, hot_conn, *sh, in, reply, out, deadline);
      } else {
        if (hot_conn)
          throw Error(Errc::kProtocol, name + ": a hot-key connection carries only refreshes");
        // A chain connection relays every worker's writes.
        const int w = chain_conn ? int(h.worker) : worker;
        if (chain_conn && h.worker >= uint32_t(opt.workers))
          throw Error(Errc::kInvalidArgument, name + ": forwarded frame names worker " +
                                                  std::to_string(h.worker));
        const uint64_t n = st.expected_payload(h, w);
        const uint8_t* payload = nullptr;
        if (n <= link.in_place_max(kInPlace)) {  // run where it lies: no copy
          payload = link.take(n, deadline, "parameter server: request payload");
        } else {
          in.resize(n);
          link.payload(in.data(), n, deadline, "parameter server: request payload");
          payload = in.data();
        }
        check_role(*sh, h, chain_conn);
        if (wire::is_write(h.op)) {
          std::lock_guard<std::mutex> lk(sh->fwd_mu);
          st.handle(h, payload, reply, out, deadline);
          forward(*sh, h, payload, deadline);
        } else {
          st.handle(h, payload, reply, out, deadline);
        }
      }
    } catch (const Error& e) {
      // A payload cut short by the worker's death; also a wait ended by a
      // stop or a lost worker, which ends the job anyway.
      gone = connection_lost(e);
      BRAID_LOG(kInfo, name << ": dropping worker " << worker << ": " << e.what());
      reject(link, *target, h, e);
      break;
    }
    if (joined) break;
    reply.epoch = view.epoch();  // a worker behind it re-reads the view
    if (moving) reply.flags |= wire::kShm;
    try {
      if (out.placed())
        link.send_placed(reply, "parameter server: reply");
      else
        link.send(reply, out.data(), deadline, "parameter server: reply");
    } catch (const Error&) {
      gone = true;
      break;  // the worker went away; its id is released below
    }
    out.unplace();
    if (moving) link.use_shm(std::move(moving));
    target->count_traffic(sizeof h + h.payload, sizeof reply + reply.payload, false);
  }
  if (worker >= 0) sh->state->detach(worker, gone);
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
  // Before the address, which workers wait for: with it they tell whether
  // they share this host (link.h).
  store->set_str("ps/host/" + std::to_string(opt.rank), comm::host_identity());
  store->set_str("ps/server/" + std::to_string(opt.rank), host + ":" + std::to_string(impl_->port));
  try {
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

}  // namespace braid::ps
