// One handler per connection role (connection.h), and the frame loop they
// share. server.cc has read the hello and found its shard; each handler
// answers the hello its own way, then serves the frames its role may send:
//  - a worker: attaches its id (given back when the connection ends) and
//    may move the connection to shared memory; then pushes, pulls, clocks,
//    reports, stats, byes, batches and hot pulls;
//  - a chain predecessor (ps/replication/chain.h): every worker's writes,
//    applied and forwarded down the chain;
//  - a peer's hot-key refreshes (ps/hot/hot_keys.h);
//  - a joining server (ps/replication/chain_join.h): one join, whose
//    exchange reads the connection itself and ends it.
#include "ps/server/connection.h"

#include <sys/socket.h>

#include "braid/log.h"
#include "ps/replication/chain_join.h"
#include "ps/server/server_impl.h"
#include "ps/server_name.h"

namespace braid::ps {

namespace {
// A request payload up to this is used where the connection's reader
// buffered it (it stays put until the next read); a larger one is read into
// a vector of its own, so the reader's buffer never grows past it.
constexpr uint64_t kInPlace = uint64_t(256) << 10;

bool is_hot(uint16_t op) {
  return op == wire::kHotPush || op == wire::kHotPull || op == wire::kHotSet;
}

Error join_only(int rank) {
  return Error(Errc::kProtocol,
               server_name(rank) + ": a join connection carries only a join of its hello's shard");
}

// The reply to a hello: the hello itself, answered (a worker's shared
// memory is confirmed once the reply is due).
wire::Header hello_reply(const wire::Header& h) {
  wire::Header reply = h;
  reply.op = uint16_t(h.op | wire::kReply);
  reply.flags = uint16_t(h.flags & ~wire::kShm);
  reply.payload = 0;
  return reply;
}

// The hello of a server's connection (chain, hot-key, join): no payload.
auto server_hello(Connection& c, int rank) {
  return [&c, rank](const wire::Header& h, wire::Header& reply, int64_t) {
    if (h.payload)
      throw Error(Errc::kProtocol, server_name(rank) + ": a server's hello carries no payload");
    reply = hello_reply(h);
    c.out.clear();
    return true;
  };
}
}  // namespace

bool Server::Impl::next_frame(Connection& c, wire::Header& h, ShardState& st) {
  for (;;) {
    if (stopping) return false;
    h = wire::Header{};
    try {
      if (!c.link.arrived("parameter server: request")) continue;
      h = c.link.header(wire::deadline_after(opt.timeout), "parameter server: request");
      return true;
    } catch (const Error& e) {
      c.gone = e.code() == Errc::kPeerDied;
      if (!c.gone) reject(c.link, st, h, e);  // garbage, or a stalled header
      return false;
    }
  }
}

template <class Hello, class Frame>
void Server::Impl::frames(Connection& c, wire::Header h, ShardState& st, Hello&& hello,
                          Frame&& frame) {
  bool first = true;
  do {
    const int64_t deadline = wire::deadline_after(opt.timeout);
    // A goodbye counts as answered once its reply is out (or cannot go):
    // until then the server's owner may not close this connection.
    struct ByeGuard {
      ShardState* st = nullptr;
      ~ByeGuard() {
        if (st) st->bye_end();
      }
    } bye;
    if (!first && h.op == wire::kBye) {
      st.bye_begin();
      bye.st = &st;
    }
    wire::Header reply{};
    size_t room = 0;
    if (uint8_t* area = c.link.reply_area(&room)) c.out.place(area, room);
    try {
      if (!(first ? hello(h, reply, deadline) : frame(h, reply, deadline))) return;
      first = false;
    } catch (const Error& e) {
      // A payload cut short by the peer's death; also a wait ended by a
      // stop or a lost worker, which ends the job anyway.
      c.gone = connection_lost(e);
      BRAID_LOG(kInfo, server_name(opt.rank)
                           << ": dropping worker " << c.worker << ": " << e.what());
      reject(c.link, st, h, e);
      return;
    }
    reply.epoch = view.epoch();  // a worker behind it re-reads the view
    if (c.moving) reply.flags |= wire::kShm;
    try {
      if (c.out.placed())
        c.link.send_placed(reply, "parameter server: reply");
      else
        c.link.send(reply, c.out.data(), deadline, "parameter server: reply");
    } catch (const Error&) {
      c.gone = true;
      return;  // the peer went away
    }
    c.out.unplace();
    if (c.moving) c.link.use_shm(std::move(c.moving));
    st.count_traffic(sizeof h + h.payload, sizeof reply + reply.payload, false);
  } while (next_frame(c, h, st));
}

void Server::Impl::data_frame(Connection& c, Shard& sh, const wire::Header& h, bool chain_conn,
                              wire::Header& reply, int64_t deadline) {
  if (h.op == wire::kJoin) throw join_only(opt.rank);
  if (is_hot(h.op)) return hot_frame(c.link, h, false, sh, c.in, reply, c.out, deadline);
  // A chain connection relays every worker's writes.
  const int w = chain_conn ? int(h.worker) : c.worker;
  if (chain_conn && h.worker >= uint32_t(opt.workers))
    throw Error(Errc::kInvalidArgument, server_name(opt.rank) + ": forwarded frame names worker " +
                                            std::to_string(h.worker));
  ShardState& st = *sh.state;
  const uint64_t n = st.expected_payload(h, w);
  const uint8_t* payload = nullptr;
  if (n <= c.link.in_place_max(kInPlace)) {  // run where it lies: no copy
    payload = c.link.take(n, deadline, "parameter server: request payload");
  } else {
    c.in.resize(n);
    c.link.payload(c.in.data(), n, deadline, "parameter server: request payload");
    payload = c.in.data();
  }
  check_role(sh, h, chain_conn);
  if (wire::is_write(h.op)) {
    std::lock_guard<std::mutex> lk(sh.fwd_mu);
    st.handle(h, payload, reply, c.out, deadline);
    forward(sh, h, payload, deadline);
  } else {
    st.handle(h, payload, reply, c.out, deadline);
  }
}

void Server::Impl::serve_worker(Connection& c, const wire::Header& hello, Shard& sh) {
  bool attached = false;
  frames(
      c, hello, *sh.state,
      [&](const wire::Header& h, wire::Header& reply, int64_t deadline) {
        sh.state->expected_payload(h, -1);
        sh.state->attach(int(h.worker));
        c.worker = int(h.worker);
        attached = true;  // before anything else may throw: the worker is detached below
        c.moving = accept_shm(c.link, h, deadline);
        reply = hello_reply(h);
        c.out.clear();
        return true;
      },
      [&](const wire::Header& h, wire::Header& reply, int64_t deadline) {
        data_frame(c, sh, h, false, reply, deadline);
        return true;
      });
  if (attached) sh.state->detach(c.worker, c.gone);
}

void Server::Impl::serve_chain(Connection& c, const wire::Header& hello, Shard& sh) {
  frames(c, hello, *sh.state, server_hello(c, opt.rank),
         [&](const wire::Header& h, wire::Header& reply, int64_t deadline) {
           data_frame(c, sh, h, true, reply, deadline);
           return true;
         });
}

void Server::Impl::serve_hot_peer(Connection& c, const wire::Header& hello, Shard& sh) {
  frames(c, hello, *sh.state, server_hello(c, opt.rank),
         [&](const wire::Header& h, wire::Header& reply, int64_t deadline) {
           if (h.op == wire::kJoin) throw join_only(opt.rank);
           if (!is_hot(h.op))
             throw Error(Errc::kProtocol,
                         server_name(opt.rank) + ": a hot-key connection carries only refreshes");
           hot_frame(c.link, h, true, sh, c.in, reply, c.out, deadline);
           return true;
         });
}

void Server::Impl::serve_join(Connection& c, const wire::Header& hello, Shard& sh) {
  frames(c, hello, *sh.state, server_hello(c, opt.rank),
         [&](const wire::Header& h, wire::Header&, int64_t deadline) {
           if (h.op != wire::kJoin || h.key != uint32_t(sh.id)) throw join_only(opt.rank);
           if (c.link.buffered())  // the join's exchange reads the connection itself
             throw Error(Errc::kProtocol,
                         server_name(opt.rank) + ": bytes after a join request, before its reply");
           send_shard_state(c.fd, h, *sh.state, sh.fwd_mu, view, opt.rank, deadline);
           return false;  // the whole exchange is done: close the connection
         });
}

}  // namespace braid::ps
