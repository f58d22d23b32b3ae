// ps::Server's internals, shared by server.cc (accepting, the hello,
// chains, joins), connection.cc (one handler per connection role) and
// server_hot.cc (hot-key frames). Private to src/ps.
#pragma once

#include <atomic>
#include <list>
#include <map>
#include <mutex>
#include <thread>

#include "braid/ps.h"
#include "core/log_limit.h"
#include "ps/replication/chain.h"
#include "ps/io/frame_reader.h"
#include "ps/hot/hot_keys.h"
#include "ps/hot/hot_sender.h"
#include "ps/io/link.h"
#include "ps/shard/shard_state.h"

namespace braid::ps {

struct Connection;

// How long a connection's read waits before the server's stop is checked.
constexpr int kPollMs = 100;
// Whether an error means the connection's peer went away.
inline bool connection_lost(const Error& e) {
  return e.code() == Errc::kPeerDied || e.code() == Errc::kIo;
}

struct Server::Impl {
  ServerOptions opt;
  std::shared_ptr<Store> store;
  ChainView view;
  struct Shard {
    int id = 0;
    std::unique_ptr<ShardState> state;
    std::mutex fwd_mu;  // held over apply + forward + ack (top comment)
    int next = -1, next_fd = -1;
  };
  std::map<int, std::unique_ptr<Shard>> shards;
  int listen_fd = -1;
  int port = 0;
  std::atomic<bool> stopping{false};
  std::thread acceptor;
  std::mutex mu;
  // One per accepted connection, until the accept thread reaps it (joins
  // its thread and closes its fd) after `done`; `proving` while its peer
  // has yet to prove the secret. At most kMaxProving connections prove it
  // at once: more are closed on arrival, so a flood of strangers costs
  // bounded threads and descriptors.
  struct Conn {
    int fd = -1;
    std::thread thread;
    std::atomic<bool> proving{true};
    std::atomic<bool> done{false};
  };
  static constexpr size_t kMaxProving = 256;
  std::list<Conn> conns;
  void reap_locked();  // under mu
  size_t proving_locked() const;
  LogLimiter stranger_log;  // connections dropped before the hello
  std::vector<JoinReport> joins;  // ServerOptions::join's, in order
  // Lost workers (server_lost.cc): run by the accept thread between polls.
  void check_lost();
  int64_t next_lost_check = 0;
  bool lost = false;  // the shards have failed on a lost worker

  Impl(const Layout& layout, const ServerOptions& o, std::shared_ptr<Store> st,
       const std::vector<std::vector<float>>& init,
       std::function<void(KeyId, int64_t, float*)> init_sparse)
      : opt(o), store(std::move(st)), view(layout.servers(), o.replicas, store) {
    const bool joining = !o.join.empty();
    if (joining) {
      BRAID_CHECK_ARG(o.rank >= layout.servers(),
                      "a joining parameter server needs a replacement's id (>= " +
                          std::to_string(layout.servers()) + "), not " + std::to_string(o.rank));
      BRAID_CHECK_ARG(o.replicas >= 2, "joining a chain needs replicas >= 2");
      BRAID_CHECK_ARG(o.resume_from.empty(), "a joining server takes its state from its chain, "
                                             "not from a checkpoint");
    } else {
      BRAID_CHECK_ARG(o.rank >= 0 && o.rank < layout.servers(),
                      "server rank " + std::to_string(o.rank) + " outside 0.." +
                          std::to_string(layout.servers() - 1));
    }
    for (int s : joining ? o.join : view.shards_of(o.rank)) {
      BRAID_CHECK_ARG(s >= 0 && s < layout.servers() && !shards.count(s),
                      "a joining server's shards must be distinct and in 0.." +
                          std::to_string(layout.servers() - 1) + " (got " + std::to_string(s) + ")");
      ServerOptions so = o;
      so.rank = s;
      so.join.clear();
      auto sh = std::make_unique<Shard>();
      sh->id = s;
      sh->state = std::make_unique<ShardState>(layout, so, init, init_sparse);
      // Saved by one replica (ps_checkpoint.h): the chain's live head, as
      // the store says at the save (a chain's write reaches its head first).
      if (o.replicas > 1)
        sh->state->set_saves([this, s] {
          try {
            view.refresh();
            return view.head(s) == opt.rank;
          } catch (const Error&) {
            return false;  // the store or the whole chain is gone: nothing to save into
          }
        });
      shards[s] = std::move(sh);
    }
    if (o.hot_keys) {
      replicas = std::make_unique<HotReplicas>(layout, o);
      sender = std::make_unique<HotSender>(o, layout.servers(), store);
      own().set_hot_sink([this](int64_t round, uint64_t rows, std::vector<uint8_t> p) {
        sender->enqueue(round, rows, std::move(p));
      });
      for (auto& [id, sh] : shards) sh->state->set_hot_pulls(hot_pulls());
    }
  }
  // The shard numbered as this server; a joiner's first joined shard.
  ShardState& own() { return *shards.at(opt.join.empty() ? opt.rank : opt.join.front())->state; }
  void shutdown();

  void accept_loop();
  // A connection's thread (server.cc): proves the secret, reads the hello
  // and hands the connection to its role's handler (connection.cc).
  void serve(Conn& conn);
  void serve_worker(Connection& c, const wire::Header& hello, Shard& sh);
  void serve_chain(Connection& c, const wire::Header& hello, Shard& sh);
  void serve_hot_peer(Connection& c, const wire::Header& hello, Shard& sh);
  void serve_join(Connection& c, const wire::Header& hello, Shard& sh);
  // The frame loop every handler runs, from the hello `h` (read already)
  // on: `hello(h, reply, deadline)` answers it, `frame(...)` each later
  // frame, filling `reply` and c.out; either returns false when the
  // connection ends without a reply (a join's exchange). The loop ends at
  // an error (answered with an error reply), a closed peer or the server's
  // stop; `st` counts the traffic.
  template <class Hello, class Frame>
  void frames(Connection& c, wire::Header h, ShardState& st, Hello&& hello, Frame&& frame);
  // Reads the next request's header into `h`; false when the connection
  // ends (a closed peer, or garbage, answered with an error reply).
  bool next_frame(Connection& c, wire::Header& h, ShardState& st);
  // A worker's or a chain predecessor's frame for the shard (or its hot
  // frames): its payload read, its role checked, run; a write forwarded.
  void data_frame(Connection& c, Shard& sh, const wire::Header& h, bool chain_conn,
                  wire::Header& reply, int64_t deadline);
  void reject(Link& link, ShardState& st, const wire::Header& h, const Error& e);
  // The shared memory a worker's hello offers (wire.h kShm), mapped; null
  // when it offers none or it cannot be mapped here (the link stays TCP).
  std::unique_ptr<ShmChannel> accept_shm(Link& link, const wire::Header& h, int64_t deadline);
  Shard& hello(const wire::Header& h);
  void check_role(const Shard& sh, const wire::Header& h, bool chain_conn);
  void forward(Shard& sh, const wire::Header& h, const uint8_t* payload, int64_t deadline);
  int connect_successor(int succ, int shard, int64_t deadline);
  // Hot keys: copies of other shards' hot rows, and the refresh sender.
  std::unique_ptr<HotReplicas> replicas;
  std::unique_ptr<HotSender> sender;
  void hot_frame(Link& link, const wire::Header& h, bool hot_conn,
                 Shard& sh, std::vector<uint8_t>& in, wire::Header& reply,
                 ReplyBuf& out, int64_t deadline);
  // A worker's hot pull from the replicas; appends the rows to `out`.
  void hot_pull(const wire::Header& h, const uint8_t* rows, wire::Header& reply,
                ReplyBuf& out, int64_t deadline);
  // Hot pulls inside a worker's batches (shard_state.h).
  ShardState::HotPulls hot_pulls();
};

}  // namespace braid::ps
