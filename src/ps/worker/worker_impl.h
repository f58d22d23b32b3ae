// Worker::Impl, private to the worker's files: worker_io.cc (frames and
// the exchange with the servers) and worker.cc (connecting, the I/O thread
// and the public calls).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "braid/ps.h"
#include "ps/replication/chain.h"
#include "ps/io/link.h"
#include "ps/io/wire.h"

namespace braid::ps {

using wire::Header;

// One frame of a request and where its reply goes.
struct Frame {
  int server = 0;                      // the shard (its chain picks the process)
  bool done = false;                   // its reply was read
  Header h;
  std::vector<uint8_t> own;            // payload built here (sparse ids / rows)
  const void* ext = nullptr;           // or the caller's floats (dense push)
  float* dest = nullptr;               // dense pull: reply lands here
  float* sparse_base = nullptr;        // sparse pull: rows scattered here
  std::vector<size_t> sparse_pos;      //   at these row positions
  int64_t width = 0;
  uint64_t reply_bytes = 0;            // expected reply payload
  std::vector<uint8_t>* reply_into = nullptr;  // stats: raw payload
  int64_t* assigned = nullptr;         // pull: the clock the server assigns
};
struct Worker::Impl {
  Layout layout;
  WorkerOptions opt;
  std::shared_ptr<Store> store;
  ChainView view;
  // Open connections by (shard, server process): a connection serves one
  // shard, for writes when the process is its head, reads when its tail.
  std::map<std::pair<int, int>, int> conns;
  // Every frame goes through its connection's link (link.h), dropped with
  // the connection.
  std::map<int, Link> links;
  WorkerStats counters;  // under mu
  uint64_t next_req = 1;
  std::string broken;  // the first error; set once
  // Hot rows learned by refresh_hot (caller's thread only); pulled from
  // replicas.
  std::set<std::pair<KeyId, int64_t>> hot;

  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> queue;
  bool stopping = false;
  bool busy = false;  // a request is running (on either thread)
  std::thread io;

  Impl(const Layout& l, const WorkerOptions& o, std::shared_ptr<Store> st)
      : layout(l), opt(o), store(st), view(l.servers(), o.replicas, st) {
    counters.pushes_acked.assign(size_t(l.servers()), 0);
    counters.clocks_acked.assign(size_t(l.servers()), 0);
  }
  // The connection for frame h of `shard`, made on first use.
  int route(int shard, uint16_t op, int* server, int64_t deadline);
  int connect(int shard, int server, int64_t deadline);
  void count_ack(const Frame& f);
  // Reads a successful reply's payload into the frame's destination.
  void read_reply(Frame& f, const Header& r, int fd, int64_t deadline);
  // Reads a failed reply's message (its length checked first).
  std::string read_message(const Header& r, int fd, int server, uint16_t op, int64_t deadline);
  // Checks reply r's op and request id against the request `sent`.
  void check_reply(const Header& r, const Header& sent, int server) const;
  Link& link(int fd) { return links.at(fd); }
  void close_conn(int fd);

  std::string who(int s, uint16_t op) const {
    return "parameter-server worker " + std::to_string(opt.rank) + ", server " +
           std::to_string(s) + ", " + wire::op_name(op);
  }
  // Runs f, an I/O call given a short `what`; an Error it throws gets
  // who(s, op) in front. The name is built only on failure: a step runs
  // tens of these.
  template <class F>
  decltype(auto) named_io(int s, uint16_t op, F&& f) const {
    try {
      return f();
    } catch (const Error& e) {
      throw Error(e.code(), who(s, op) + ": " + e.what());
    }
  }
  Header header(uint16_t op, int s) {
    Header h;
    h.op = op;
    h.req = next_req++;
    h.worker = uint32_t(opt.rank);
    (void)s;
    return h;
  }
  void exchange(std::vector<Frame>& frames);
  // exchange with replicas 1 (worker_batch.cc): a connection's frames go
  // as batches.
  void exchange_batched(std::vector<Frame>& frames, int64_t deadline);
  void receive(int fd, int server, const Header* batch, const std::vector<size_t>& idx,
               std::vector<Frame>& frames, int64_t deadline);
  // One frame per server slice of dense key kd.key (header fields only).
  std::vector<Frame> dense_frames(const KeyData& kd, uint16_t op);
  std::vector<Frame> push_frames(const std::vector<KeyData>& grads, int64_t clock, bool advance);
  std::vector<Frame> pull_frames(const std::vector<KeyData>& out, int64_t clock, int64_t* assigned);
  Handle submit(std::function<void()> work);
  // Runs `frames`' exchange and returns when it is done (worker.cc).
  void run_sync(std::vector<Frame>& frames);
  // Runs one request, refused after an earlier failure; records the first
  // failure (after one the connections' framing is unknown).
  void run_request(const std::function<void()>& work);
  // One stats frame to server s with the kStats `flags` (wire.h).
  ServerStats stats(int s, int64_t round, uint16_t flags);
  // The frames of report() and stats(); a stats reply lands in `into`.
  Frame report_frame(int64_t clock, const double sums[3]);
  Frame stats_frame(int s, int64_t round, uint16_t flags, std::vector<uint8_t>* into);
  void io_loop();
};


}  // namespace braid::ps
