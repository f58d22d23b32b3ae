// Batched requests (wire.h kBatch, ps::Worker::step) over real sockets in
// real processes: a step's report, push, pull and stats reach each server
// as ONE frame (the servers' request counters say so) and give the same
// results as the requests sent one by one would; a malformed batch gets a
// clear error, the connection is dropped, and the server serves the next
// worker.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "braid/error.h"
#include "braid/ps.h"
#include "comm/store/auth.h"
#include "ps/io/socket.h"
#include "ps/io/wire.h"
#include "support/multiproc.h"

namespace {

using namespace std::chrono_literals;
namespace ps = braid::ps;
namespace wire = braid::ps::wire;

const std::string kSecret = "ps-batch-test-secret-0123456789";

ps::Layout layout(int servers) {
  ps::Layout l(servers);
  l.add_dense("w", 6);
  l.add_sparse("emb", 10, 2);
  return l;
}

ps::ServerOptions server_options(int rank, int workers,
                                 ps::Consistency c = ps::Consistency::kBsp) {
  ps::ServerOptions o;
  o.consistency = c;
  o.rank = rank;
  o.workers = workers;
  o.lr.base = 0.5f;
  o.secret = kSecret;
  o.timeout = 30s;
  return o;
}

// Dense w starts at 1..6, row r of emb at (r, r).
std::unique_ptr<ps::Server> start_server(int rank, int workers, std::shared_ptr<braid::Store> store) {
  return std::make_unique<ps::Server>(layout(2), server_options(rank, workers), store,
                                      std::vector<std::vector<float>>{{1, 2, 3, 4, 5, 6}, {}},
                                      [](ps::KeyId, int64_t row, float* out) {
                                        out[0] = out[1] = float(row);
                                      });
}

TEST(PsBatch, AStepIsOneFramePerServerWithTheResultsOfSeparateRequests) {
  braid::testing::expect_all_pass(3, [](int rank, int, std::shared_ptr<braid::Store> store) {
    if (rank < 2) {
      auto server = start_server(rank, 1, store);
      server->wait_finished(60s);
      return;
    }
    ps::WorkerOptions wo;
    wo.secret = kSecret;
    wo.timeout = 30s;
    ps::Worker worker(layout(2), wo, store);
    std::vector<float> w(6), rows_out(8);
    const std::vector<int64_t> rows = {1, 2, 3, 4};
    ps::StepRequest first;
    first.pull = {{0, {}, w.data()}, {1, rows, rows_out.data()}};
    first.stats = true;
    std::vector<ps::ServerStats> stats;
    EXPECT_EQ(worker.step(first, &stats), 0);
    EXPECT_EQ(w, (std::vector<float>{1, 2, 3, 4, 5, 6}));
    EXPECT_EQ(rows_out, (std::vector<float>{1, 1, 2, 2, 3, 3, 4, 4}));
    ASSERT_EQ(stats.size(), 2u);
    for (const ps::ServerStats& s : stats) EXPECT_EQ(s.requests, 1);  // the hello so far

    std::vector<float> g(6, 1.0f), rg = {2, 2, 4, 4};
    ps::StepRequest step;
    step.push_round = true;
    step.clock = 0;
    step.grads = {{0, {}, g.data()}, {1, {1, 4}, rg.data()}};
    step.sums[0] = 3.0;
    step.sums[1] = 2.0;
    step.sums[2] = 1.0;
    step.pull = first.pull;
    step.pull_clock = 1;
    step.stats = true;
    step.stats_round = 0;
    step.stats_wait = true;
    EXPECT_EQ(worker.step(step, &stats), 1);
    // SGD at lr 0.5 on the mean of one worker's push, applied before the pull.
    EXPECT_EQ(w, (std::vector<float>{0.5f, 1.5f, 2.5f, 3.5f, 4.5f, 5.5f}));
    EXPECT_EQ(rows_out, (std::vector<float>{0, 0, 2, 2, 3, 3, 2, 2}));
    for (const ps::ServerStats& s : stats) {
      EXPECT_EQ(s.requests, 2);  // hello and the first step: one frame each
      EXPECT_EQ(s.rounds_closed, 1);
      EXPECT_EQ(s.clocks, (std::vector<int64_t>{1}));
    }
    EXPECT_EQ(stats[0].report_loss, 3.0);
    EXPECT_EQ(stats[0].report_rows, 2.0);
    EXPECT_EQ(stats[0].report_workers, 1);
    // A push frame per server for the dense key, and one per server owning
    // one of the two rows.
    const ps::Layout l = layout(2);
    const int64_t row_frames = l.row_server(1) == l.row_server(4) ? 1 : 2;
    EXPECT_EQ(stats[0].pushes_accepted + stats[1].pushes_accepted, 2 + row_frames);
    worker.finish();
  });
}

int connect_authenticated(braid::Store& store) {
  const std::string addr = store.get_str("ps/server/0");
  const size_t colon = addr.rfind(':');
  int fd = ps::connect_tcp(addr.substr(0, colon), std::atoi(addr.c_str() + colon + 1), 10s, "test");
  braid::comm::authenticate_connect(fd, kSecret, 10s);
  wire::Header h;
  h.op = wire::kHello;
  h.worker = 1;
  wire::send_frame(fd, h, nullptr, wire::deadline_after(10s), "hello");
  const wire::Header r = wire::recv_header(fd, wire::deadline_after(10s), "hello reply");
  EXPECT_EQ(r.status, 0u);
  return fd;
}

// Sends a batch of `subs` (headers and payloads laid out as given, with
// the batch header's count and payload as given), then expects an error
// reply with `code` naming `words`, and the connection closed.
void expect_refused(braid::Store& store, uint64_t count, const std::vector<uint8_t>& payload,
                    uint64_t declared, braid::Errc code, const std::string& words) {
  int fd = connect_authenticated(store);
  wire::Header b;
  b.op = wire::kBatch;
  b.worker = 1;
  b.count = count;
  b.payload = declared;
  const int64_t deadline = wire::deadline_after(10s);
  braid::comm::write_full(fd, &b, sizeof b, deadline, "batch");
  try {  // the server may refuse the header before reading the payload
    if (!payload.empty()) braid::comm::write_full(fd, payload.data(), payload.size(), deadline, "batch");
  } catch (const braid::Error&) {
  }
  const wire::Header r = wire::recv_header(fd, deadline, "batch reply");
  EXPECT_EQ(r.status, uint32_t(code) + 1);
  ASSERT_LE(r.payload, wire::kMaxMessage);
  std::string msg(r.payload, '\0');
  wire::recv_payload(fd, msg.data(), msg.size(), deadline, "batch reply");
  EXPECT_NE(msg.find(words), std::string::npos) << msg;
  char c;
  EXPECT_THROW(braid::comm::read_full(fd, &c, 1, deadline, "after error"), braid::Error);
  ::close(fd);
}

void append(std::vector<uint8_t>& out, const wire::Header& h, const std::vector<float>& data) {
  const auto* p = reinterpret_cast<const uint8_t*>(&h);
  out.insert(out.end(), p, p + sizeof h);
  const auto* d = reinterpret_cast<const uint8_t*>(data.data());
  out.insert(out.end(), d, d + data.size() * 4);
}

wire::Header sub(uint16_t op, uint64_t count, uint64_t payload) {
  wire::Header h;
  h.op = op;
  h.worker = 1;
  h.key = 0;
  h.count = count;
  h.payload = payload;
  return h;
}

TEST(PsBatch, MalformedBatchesAreRefusedAndOthersKeepBeingServed) {
  braid::testing::expect_all_pass(2, [](int rank, int, std::shared_ptr<braid::Store> store) {
    if (rank == 0) {
      ps::Layout l(1);
      l.add_dense("w", 6);
      l.add_sparse("emb", 10, 2);
      // ASP: the good worker's pull does not wait for worker 1, whose id
      // the bad clients take.
      ps::Server server(l, server_options(0, 2, ps::Consistency::kAsp), store,
                        std::vector<std::vector<float>>{{1, 2, 3, 4, 5, 6}, {}});
      store->wait({"good/done"}, 60s);
      EXPECT_EQ(server.stats().rejected, 5);
      return;
    }
    std::vector<uint8_t> p;
    {  // a sub-frame whose length does not match its key: 2 floats in 4 bytes
      p.clear();
      append(p, sub(wire::kClock, 0, 0), {});
      append(p, sub(wire::kPush, 2, 4), {1.0f});
      expect_refused(*store, 2, p, p.size(), braid::Errc::kInvalidArgument, "payload of 4 bytes");
    }
    {  // a hello inside a batch
      p.clear();
      append(p, sub(wire::kHello, 0, 0), {});
      append(p, sub(wire::kClock, 0, 0), {});
      expect_refused(*store, 2, p, p.size(), braid::Errc::kProtocol,
                     "sub-frame 0 of 2 is not a push, pull, clock, report, stats or hot pull "
                     "frame");
    }
    {  // a hot pull inside a batch to a server without hot keys
      p.clear();
      append(p, sub(wire::kClock, 0, 0), {});
      wire::Header hot = sub(wire::kHotPull, 1, 8);
      hot.key = 1;
      append(p, hot, {0.0f, 0.0f});  // 8 bytes: one row id
      expect_refused(*store, 2, p, p.size(), braid::Errc::kInvalidArgument,
                     "sub-frame 1 of 2 is a hot pull, but hot keys are off");
    }
    {  // more sub-frames than the layout allows: refused before the payload
      expect_refused(*store, 100, {}, 100 * sizeof(wire::Header), braid::Errc::kInvalidArgument,
                     "100 sub-frames");
    }
    {  // a payload past what this server's keys allow: refused before reading it
      expect_refused(*store, 2, {}, uint64_t(1) << 40, braid::Errc::kInvalidArgument,
                     "sub-frames (at most");
    }
    // A well-behaved worker is served by batches after all that.
    ps::Layout l(1);
    l.add_dense("w", 6);
    l.add_sparse("emb", 10, 2);
    ps::WorkerOptions wo;
    wo.secret = kSecret;
    wo.timeout = 30s;
    ps::Worker worker(l, wo, store);
    std::vector<float> g(6, 2.0f), w(6);
    ps::StepRequest r;
    r.push_round = true;
    r.grads = {{0, {}, g.data()}};
    r.pull = {{0, {}, w.data()}};
    r.pull_clock = 1;
    EXPECT_EQ(worker.step(r), 1);
    EXPECT_EQ(w, (std::vector<float>{0, 1, 2, 3, 4, 5}));  // w − 0.5·g, applied on arrival
    worker.finish();
    store->set_str("good/done", "1");
  });
}

}  // namespace
