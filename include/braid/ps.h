// Parameter server: servers own key ranges and the optimizer state of those
// ranges; workers push gradients and pull parameters.
//
// Keys. A Layout lists the job's keys, the same on every process:
//  - dense tensors, registered by name and size, each cut into S contiguous
//    slices, slice s on server s (slice s of n elements is
//    [n·s/S, n·(s+1)/S)); a key smaller than S leaves some servers empty;
//  - sparse tables of fixed-width rows (embeddings), a row's server chosen
//    by a mixing hash of its row id, so Zipf-hot rows spread over servers.
// Keys are numbered in registration order (KeyId); a push or pull names
// keys by id.
//
// Connections. Servers listen on TCP and publish "host:port" in the job's
// store under "ps/server/<s>"; every worker connects to every server. Each
// connection proves the job secret (comm/store/auth.h) before any frame is
// read, then says which worker it is (a worker id is taken once). One dead
// or misbehaving connection ends only itself: the server keeps serving the
// others. Frames (src/ps/wire.h) carry one key range each; with R = 1 a
// request's frames to one server travel as one batch frame (Worker::step:
// a training step is one frame per server). Every length is checked
// against the server's own shapes before anything is allocated or read; a
// bad frame gets an error reply (when the socket still takes one) and the
// connection is dropped.
//
// Consistency (one option for the whole job). A worker's clock is the round
// it is computing. Pushes of round c go to round c's buffer; a worker's last
// push of a round on a server carries the clock flag (Worker::push with
// clock = true), which counts it into that round.
//  - kBsp: round c closes when all W workers clocked it; the server then
//    applies the MEAN of the W pushes in worker order as one optimizer step
//    (= all-reduce data parallel, which sums each rank's share of the global
//    mean). A pull for clock c waits until rounds < c are applied.
//  - kSsp (staleness s): rounds close as in BSP; a pull for clock c waits
//    only while the slowest worker's clock is below c − s. s = 0 is BSP.
//  - kAsp: every push is applied on arrival as its own optimizer step;
//    pulls never wait.
//  - kRoundK (k-of-n): a round closes when K workers clocked it, applying
//    the mean of what arrived. A push for a closed round is late: dropped,
//    or folded into the open round (LatePolicy), and counted. A pull answers
//    with the open round, which the worker takes as its next clock, so a
//    straggler rejoins the current round.
// Rounds are per server: each server closes its own rounds from the pushes
// it receives.
//
// Chain replication (ServerOptions/WorkerOptions::replicas = R, src/ps/chain.h).
// Shard s (what the Layout places on server s) is kept by the chain of
// servers s, s+1, …, s+R−1 (mod S), each holding a ps::ShardState of it.
// Writes (push, clock, report, bye) go to the head, which applies each and
// forwards it unchanged to its live successor; a member answers only after
// its successor's ack, so the worker's ack means the write is applied on
// every live member. Reads (pull, stats) go to the tail. The configuration
// is the set of servers declared dead, in the store; its size is the epoch
// frames carry. A connection that closes without an error reply declares
// its server dead; workers re-send every frame not yet answered to the new
// head or tail, and a member that lost its successor re-sends its one
// in-flight write to the next live member.
// Invariant: no acknowledged update is lost, none is applied twice. An
// acked write is on every live member, and the new head and tail come from
// those. A worker's request ids increase over all its connections and its
// writes reach every member of a chain in that order (one write per shard in
// flight along a chain; a worker's re-sends keep their ids and order), so a
// member drops a write whose id is not above the last it applied from that
// worker (ServerStats::writes_duplicate). With R = 1 the chain is the server
// alone and nothing changes. A chain whose members all died fails its
// requests with kPeerDied.
// Joins (ServerOptions::join, src/ps/chain_join.h): a replacement server,
// under a fresh id from replacement_id, joins a shard's chain as its new
// tail. The current tail pauses the shard's writes (holds its forwarding
// lock), streams the shard's full state to it, records the join in the
// store (a new epoch) and resumes: every write it acknowledged before is in
// the copy, every later one is forwarded to the new tail and acknowledged
// only after it. Servers answer with their epoch; a worker that sees a
// newer one re-reads the view and reads from the new tail. A chain never
// grows past R: a join into a chain with R live members is refused
// (kInvalidArgument naming the shard and its members).
// Hot keys (ServerOptions::hot_keys; BSP or SSP, R = 1). Every server
// counts the pulls of each sparse row it owns. At each round close it adds
// to its hot set the rows whose count is at least 8× the mean count over the
// rows of its shard pulled so far, hottest first, until the set holds
// hot_max_rows rows; the set only grows. After adding, it pushes the current
// values of every hot row, tagged with its closed-round count, to every
// other server (a kHotPush frame, src/ps/hot_keys.h), which keeps them as
// read-only copies. A worker learns the hot sets with Worker::refresh_hot
// and from then pulls each hot row from one of the other servers (chosen by
// worker id and row, so replicas share the load); cold rows, and every
// push, go to the owner. Staleness: a replica answers a pull at clock c
// only once it holds a refresh tagged with at least the rounds the owner
// would have to have closed (BSP: c; SSP: c − s), so the bounds of the
// consistency hold unchanged. Under BSP the answer equals the owner's: a
// worker at clock c has not clocked round c, so no refresh past c exists.
// ASP and k-of-n are refused (no round gates their pulls).
// Co-located servers talk TCP over loopback today; a shared-memory path
// without staging copies is not built.
//
// Errors: braid::Error. kInvalidArgument for bad calls (unknown key, wrong
// length), kTimeout when a wait passes its deadline, kPeerDied when a server
// closed the connection, kAuth for a failed proof, kProtocol for a malformed
// frame; messages name the worker, the server and the operation.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "braid/optim.h"
#include "braid/store.h"

namespace braid::ps {

using KeyId = uint32_t;

enum class Consistency { kBsp, kAsp, kSsp, kRoundK };
enum class LatePolicy { kDrop, kFold };
// "bsp" | "asp" | "ssp" | "kofn"; throws Error(kInvalidArgument) otherwise.
Consistency parse_consistency(const std::string& s);
const char* consistency_name(Consistency c);

// Server-side update rule. Formulas equal braid::nn's optimizers (optim.h):
//  kSgd:     g' = g + wd·w; buf = μ·buf + g'; w −= lr·buf   (μ = 0: w −= lr·g')
//  kAdagrad: g' = g + wd·w; h += g'²; w −= lr·g' / (√h + eps)   (PyTorch)
//  kAdamW:   w ·= 1 − lr·wd; m, v moving averages; bias-corrected step
//            (wd = 0 is Adam).
// Weight decay applies only to keys registered with decay = true.
struct UpdateRule {
  enum Kind { kSgd, kAdagrad, kAdamW } kind = kSgd;
  float momentum = 0, weight_decay = 0;
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  // State floats kept per parameter element: 0/1 (sgd), 1 (adagrad), 2 (adamw).
  int slots() const;
};
// "sgd" | "adagrad" | "adam" | "adamw"; throws Error(kInvalidArgument).
UpdateRule::Kind parse_update_rule(const std::string& s);

struct KeySpec {
  std::string name;
  bool sparse = false;
  int64_t size = 0;   // dense: elements
  int64_t rows = 0;   // sparse: rows, each `width` floats
  int64_t width = 0;
  bool decay = true;  // weight decay applies
};

// The job's keys and their placement over `servers` servers.
class Layout {
 public:
  explicit Layout(int servers);
  // Registration order gives the ids. Throws kInvalidArgument for an empty
  // or duplicate name or a non-positive size.
  KeyId add_dense(const std::string& name, int64_t size, bool decay = true);
  KeyId add_sparse(const std::string& name, int64_t rows, int64_t width, bool decay = true);

  int servers() const { return servers_; }
  size_t size() const { return keys_.size(); }
  // Throws kInvalidArgument naming the id when unknown.
  const KeySpec& key(KeyId k) const;
  // Dense: server s's slice [begin, end) of key k (may be empty).
  int64_t slice_begin(KeyId k, int s) const;
  int64_t slice_end(KeyId k, int s) const { return slice_begin(k, s + 1); }
  // Sparse: the server that owns `row` (no range check).
  int row_server(int64_t row) const;
  // Elements per server over all dense keys (load balance of the layout).
  std::vector<int64_t> dense_elements_per_server() const;

 private:
  int servers_;
  std::vector<KeySpec> keys_;
};

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
  std::string bind_host = "127.0.0.1";  // address to listen on and publish
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

struct WorkerOptions {
  int rank = 0;     // this worker's id, 0 ≤ rank < W
  int replicas = 1;  // R, as the servers'
  std::string secret;
  std::chrono::milliseconds timeout{std::chrono::seconds(120)};  // every wait
  // Bytes of each direction's ring on a connection to a server on this
  // host: frames then travel through shared memory, and the server applies
  // a push where it lies. 0 keeps every connection on TCP.
  size_t shm_bytes = size_t(4) << 20;
};

// A worker's own counters (Worker::worker_stats).
struct WorkerStats {
  // Per shard: push frames and clock advances (kAdvance pushes and bare
  // clocks) the shard's chain acknowledged, i.e. applied on every live
  // member. Re-sends after a fail-over count once.
  std::vector<int64_t> pushes_acked, clocks_acked;
  int64_t reroutes = 0;       // requests that lost a server and were re-routed
  double max_reroute_s = 0;   // longest: from the lost connection to the last reply
  uint32_t epoch = 0;         // chain configuration the worker routes by
  int64_t shm_links = 0;      // connections moved to shared memory (link.h)
};

// A request in flight. wait() rethrows the request's error.
class Handle {
 public:
  Handle() = default;
  void wait();
  bool test();  // true once done (wait() then returns at once)
  struct State;
  explicit Handle(std::shared_ptr<State> s) : s_(std::move(s)) {}

 private:
  std::shared_ptr<State> s_;
};

// One key range of a push or pull: dense key k (all of it), or the listed
// rows of sparse key k. `data` holds size (dense) or rows.size()·width
// floats.
struct KeyData {
  KeyId key = 0;
  std::vector<int64_t> rows;  // sparse only
  float* data = nullptr;
};

// One training step's requests, made together by Worker::step: with R = 1
// each server gets them as ONE frame (a batch), so a step costs one round
// trip per server instead of one per request.
struct StepRequest {
  // When push_round: round `clock`'s training sums go to server 0 (as
  // report), then `grads` are pushed advancing the clock (as push with
  // advance).
  bool push_round = false;
  int64_t clock = 0;
  std::vector<KeyData> grads;
  double sums[3] = {0, 0, 0};  // loss sum, rows, correct
  // Then `pull` is pulled for a worker at `pull_clock` (as pull); none when
  // empty.
  std::vector<KeyData> pull;
  int64_t pull_clock = 0;
  // Then, when stats, every server's counters are read (as stats(s,
  // stats_round, stats_wait && s == 0)).
  bool stats = false;
  int64_t stats_round = -1;
  bool stats_wait = false;
};

// The client side: one authenticated connection per server. Calls on one
// Worker run in the order made; the async forms return at once and run on
// the worker's I/O thread; requests to different servers are in flight
// together. Not for concurrent use from several threads.
class Worker {
 public:
  // Waits for every server's address in `store`, connects, authenticates
  // and says hello. Throws kTimeout / kAuth / kInvalidArgument.
  Worker(const Layout& layout, const WorkerOptions& opt, std::shared_ptr<Store> store);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Pushes gradients of round `clock`; with `advance`, this worker has
  // finished round `clock` on every server (servers not named get a bare
  // clock frame). Gradient lengths must match the keys.
  void push(const std::vector<KeyData>& grads, int64_t clock, bool advance);
  // Pulls parameters as the consistency allows for a worker at `clock`.
  // Returns the clock the servers assign (kRoundK: the open round; else
  // `clock`); with several servers, the smallest.
  int64_t pull(const std::vector<KeyData>& out, int64_t clock);
  // push (advancing the clock), then pull for clock + 1.
  int64_t push_pull(const std::vector<KeyData>& grads, const std::vector<KeyData>& out,
                    int64_t clock);
  // The requests of `r`, in its order, as one exchange (StepRequest). Returns
  // the clock the pull was assigned (pull_clock without a pull); fills
  // `stats` (one per server) when r.stats.
  int64_t step(const StepRequest& r, std::vector<ServerStats>* stats = nullptr);
  Handle push_async(std::vector<KeyData> grads, int64_t clock, bool advance);
  Handle pull_async(std::vector<KeyData> out, int64_t clock, int64_t* assigned = nullptr);

  // Sends this round's training sums (loss sum, rows, correct) to server 0,
  // which adds them up per round for the log.
  void report(int64_t clock, double loss_sum, double rows, double correct);
  // Server `s`'s counters; with wait_round ≥ 0 (not kAsp) it first waits
  // until that round closed there, and the report sums are that round's.
  ServerStats stats(int s, int64_t round = -1, bool wait_round = false);
  // Server `s`'s counters once every other worker has said goodbye
  // (finish), so they count every push of the job: a straggler's last,
  // late push may arrive after the others are done.
  ServerStats final_stats(int s);
  // Asks every server for its hot rows (ServerOptions::hot_keys); later
  // pulls read those rows from replicas. Returns the number of hot rows.
  int64_t refresh_hot();
  // The hot rows the last refresh_hot learned, as (key, row).
  std::vector<std::pair<KeyId, int64_t>> hot_rows() const;
  // Says goodbye to every server (they count the workers still attached).
  void finish();
  WorkerStats worker_stats() const;

  int rank() const;
  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace braid::ps
