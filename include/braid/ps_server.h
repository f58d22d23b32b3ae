// ps::Server: one parameter server, owning its shard of every key and that
// shard's optimizer state; answers its workers' pushes and pulls, forwards
// writes along its chain, serves hot-key copies, saves shards, and can
// join a chain as a replacement (docs/PS.md).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "braid/optim.h"
#include "braid/ps_keys.h"
#include "braid/store.h"

namespace braid::ps {

struct ServerOptions {
  int rank = 0;                 // this server's index, 0 ≤ rank < layout.servers()
  int workers = 1;              // W
  Consistency consistency = Consistency::kBsp;
  int staleness = 0;            // kSsp
  int round_k = 0;              // kRoundK: K, 1 ≤ K ≤ W
  LatePolicy late = LatePolicy::kDrop;
  UpdateRule rule;
  nn::LrSchedule lr;            // round r (ASP: update u) uses lr.at(r)
  std::string secret;           // the job secret every connection proves
  int replicas = 1;             // R: chain length of every shard (chain.h)
  // Address to listen on and publish for workers and other servers. "":
  // the address the job's TCP transport announces to other hosts
  // (comm::tcp_local_endpoint: BRAID_TCP_ADDR, else the first interface
  // that is up and not loopback, else loopback), so workers on any host
  // of the job reach it; workers on this host connect there too.
  std::string bind_host;
  std::chrono::milliseconds timeout{std::chrono::seconds(120)};  // every wait
  bool hot_keys = false;        // read replicas of hot rows (top comment)
  int hot_max_rows = 32;        // the most rows a server makes hot
  // Checkpoints (braid/ps_checkpoint.h). With save_dir set, the server
  // writes its own shard when round N closes (under kAsp, which has no
  // rounds: once every worker has clocked step N, with whatever later
  // pushes it applied by then), for N a positive multiple of save_every or
  // N == save_last,
  // adding checkpoint_meta to the file's meta. With resume_from (a step
  // directory, ps_checkpoint.h) it starts from the shards saved there
  // instead of `init`.
  std::string save_dir, resume_from;
  int64_t save_every = 0, save_last = 0;
  std::map<std::string, std::string> checkpoint_meta;
  // Joining (needs replicas >= 2): the shards whose chains this server
  // joins as their new tail, one after another, before the constructor
  // returns; `rank` is then its id from replacement_id (>= the layout's
  // server count), and `init` only shapes the state the transfer replaces.
  std::vector<int> join;
};

// One chain a joining server joined (Server::joins): the shard, the tail
// that handed it over, the chain epoch the join made, how long the tail
// held the shard's writes (from taking its forwarding lock to releasing
// it: the state copy and the commit), and the open rounds (pushes or
// clocks buffered, the round not yet closed) the copied state carried.
struct JoinReport {
  int shard = 0, tail = 0;
  uint32_t epoch = 0;
  double pause_s = 0;
  int64_t open_rounds = 0;
};

// A fresh id for a replacement server of a job of `servers` servers: >=
// servers, unique in the job (a counter in the store), never reused.
int replacement_id(Store& store, int servers);

// Counters of one server (Server::stats, Worker::stats).
struct ServerStats {
  int rank = 0;
  int64_t pushes_accepted = 0, pushes_late = 0, pushes_dropped = 0, pushes_folded = 0;
  int64_t rounds_closed = 0, updates_applied = 0;  // kAsp: steps every worker clocked
  int64_t requests = 0, bytes_in = 0, bytes_out = 0;
  int64_t rejected = 0;  // frames answered with an error (bad client input)
  // Chains: writes skipped because their request id was already applied
  // (a worker re-sending after a fail-over), and the configuration epoch.
  int64_t writes_duplicate = 0, epoch = 0;
  // Hot keys: sparse rows served to pulls as their owner and from the hot
  // copies of other servers' rows, and the rows of this shard made hot.
  int64_t pulls_owner = 0, pulls_replica = 0, hot_rows = 0;
  std::vector<int64_t> clocks;  // per worker: 1 + the last round it clocked
  // The largest lead a pull was answered with: its clock minus the rounds
  // closed then (under BSP/SSP the slowest worker's clock). SSP bounds it by
  // the staleness s. (max − min of `clocks` may read s + 1 at a moment when
  // the leader has clocked and is waiting in its pull, reading nothing.)
  int64_t max_read_lead = 0;
  // Per worker: rounds that closed with this worker's push counted in
  // (not late). A straggler under k-of-n has fewer than rounds_closed.
  std::vector<int64_t> contributed;
  // Worker reports (Worker::report) summed for the round asked about.
  double report_loss = 0, report_rows = 0, report_correct = 0;
  int report_workers = 0;
};

class Server {
 public:
  // Initial values: dense keys from `init` (one vector per key id, the
  // key's full size; empty for sparse keys), sparse rows zero unless
  // `init_sparse` fills them. Starts listening and publishes its address in
  // `store`. Throws kInvalidArgument for bad options or shapes.
  Server(const Layout& layout, const ServerOptions& opt, std::shared_ptr<Store> store,
         const std::vector<std::vector<float>>& init,
         std::function<void(KeyId, int64_t row, float* out)> init_sparse = {});
  ~Server();  // stops serving; open connections are closed
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  int port() const;
  ServerStats stats() const;  // of its own shard (the one numbered as it)
  // Of the replica of `shard` it keeps; throws kInvalidArgument otherwise.
  ServerStats shard_stats(int shard) const;
  // Blocks until every worker has said goodbye (Worker::finish) or
  // `timeout` passes (Error(kTimeout) naming the missing workers).
  void wait_finished(std::chrono::milliseconds timeout);
  // The job failed elsewhere (`why`, e.g. another rank's posted failure):
  // every request of its workers that waits, and every later one, fails
  // with Error(kPeerDied) carrying `why`, as when this server loses a
  // worker itself. The first reason is kept.
  void fail(const std::string& why);
  // The shards it keeps a replica of, and one's full state written to
  // `path` as a join's state transfer carries it (shard_transfer.cc), for
  // comparing replicas.
  std::vector<int> shards() const;
  void save_state(int shard, const std::string& path) const;
  // A joining server's joins (ServerOptions::join), in order; empty for
  // any other server.
  std::vector<JoinReport> joins() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace braid::ps
