// Hot pulls travel inside a step's batch (wire.h kBatch), seen on the wire
// in real processes: a fake pair of servers (one process, two shards) tells
// the worker that row X of shard 0 is hot, then reads the worker's step. The
// replica's connection must carry ONE frame, a batch holding the cold pull,
// the hot pull of X (owner shard 0) and the stats request; the worker must
// put each answered row where its pull asked.
#include <gtest/gtest.h>
#include <sys/socket.h>
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

const std::string kSecret = "ps-hotkey-batch-test-secret-0123";
constexpr int64_t kRows = 64, kWidth = 2;

ps::Layout layout() {
  ps::Layout l(2);
  l.add_sparse("emb", kRows, kWidth);
  return l;
}

// Rows: X and Z of shard 0, Y of shard 1.
struct Rows {
  int64_t x = -1, y = -1, z = -1;
};
Rows pick_rows() {
  const ps::Layout l = layout();
  Rows r;
  for (int64_t i = 0; i < kRows; ++i) {
    int64_t& slot = l.row_server(i) == 1 ? r.y : r.x < 0 ? r.x : r.z;
    if (slot < 0) slot = i;
  }
  return r;
}

float value(int64_t row, int64_t i) { return float(row * 10 + i); }

struct Frame {
  wire::Header h;
  std::vector<uint8_t> payload;
};

Frame read_frame(int fd) {
  const int64_t deadline = wire::deadline_after(30s);
  Frame f;
  f.h = wire::recv_header(fd, deadline, "fake server");
  f.payload.resize(f.h.payload);
  wire::recv_payload(fd, f.payload.data(), f.payload.size(), deadline, "fake server");
  return f;
}

void append(std::vector<uint8_t>& out, const void* p, size_t n) {
  if (n == 0) return;  // p may be an empty vector's null data()
  const size_t at = out.size();
  out.resize(at + n);
  std::memcpy(out.data() + at, p, n);
}

// The reply to one request: a pull's (or hot pull's) rows, a stats
// request's encoded stats, a hot-set query's `hot` pairs.
void append_reply(std::vector<uint8_t>& out, wire::Header h, const uint8_t* payload,
                  const std::vector<int64_t>& hot) {
  std::vector<uint8_t> body;
  if (h.op == wire::kPull || h.op == wire::kHotPull) {
    for (uint64_t i = 0; i < h.count; ++i) {
      int64_t row;
      std::memcpy(&row, payload + i * 8, 8);
      for (int64_t k = 0; k < kWidth; ++k) {
        const float v = value(row, k);
        append(body, &v, 4);
      }
    }
  } else if (h.op == wire::kStats) {
    wire::encode_stats(ps::ServerStats{}, body);
  } else if (h.op == wire::kHotSet) {
    append(body, hot.data(), hot.size() * 8);
  }
  h.op |= wire::kReply;
  h.payload = body.size();
  append(out, &h, sizeof h);
  append(out, body.data(), body.size());
}

// Answers frame f (a batch: each sub-frame); returns the ops it carried.
std::vector<uint16_t> answer(int fd, const Frame& f, const std::vector<int64_t>& hot) {
  std::vector<uint16_t> ops;
  std::vector<uint8_t> out;
  if (f.h.op != wire::kBatch) {
    ops.push_back(f.h.op);
    append_reply(out, f.h, f.payload.data(), hot);
  } else {
    std::vector<uint8_t> subs;
    size_t at = 0;
    for (uint64_t i = 0; i < f.h.count; ++i) {
      wire::Header s;
      std::memcpy(&s, f.payload.data() + at, sizeof s);
      ops.push_back(s.op);
      append_reply(subs, s, f.payload.data() + at + sizeof s, hot);
      at += sizeof s + s.payload;
    }
    wire::Header r = f.h;
    r.op |= wire::kReply;
    r.payload = subs.size();
    append(out, &r, sizeof r);
    append(out, subs.data(), subs.size());
  }
  braid::comm::write_full(fd, out.data(), out.size(), wire::deadline_after(30s), "fake reply");
  return ops;
}

void run_fake_servers(braid::Store& store, const Rows& rows) {
  int port = 0;
  const int lfd = ps::listen_tcp("127.0.0.1", &port);
  for (int s = 0; s < 2; ++s)
    store.set_str("ps/server/" + std::to_string(s), "127.0.0.1:" + std::to_string(port));
  int fds[2] = {-1, -1};
  for (int n = 0; n < 2; ++n) {
    while (!ps::wait_readable(lfd, 100)) {
    }
    const int fd = ps::accept_tcp(lfd);
    ASSERT_GE(fd, 0);
    braid::comm::authenticate_accept(fd, kSecret, 10s);
    const Frame hello = read_frame(fd);
    ASSERT_EQ(hello.h.op, wire::kHello);
    ASSERT_LT(hello.h.key, 2u);
    fds[hello.h.key] = fd;
    answer(fd, hello, {});
  }
  // refresh_hot: shard 0 names X hot.
  for (int s = 0; s < 2; ++s) {
    const Frame q = read_frame(fds[s]);
    ASSERT_EQ(q.h.op, wire::kHotSet);
    answer(fds[s], q, s == 0 ? std::vector<int64_t>{0, rows.x} : std::vector<int64_t>{});
  }
  // The step: one frame per connection.
  const std::vector<uint16_t> owner = answer(fds[0], read_frame(fds[0]), {});
  const std::vector<uint16_t> replica = answer(fds[1], read_frame(fds[1]), {});
  EXPECT_EQ(owner, (std::vector<uint16_t>{wire::kPull, wire::kStats}));
  EXPECT_EQ(replica, (std::vector<uint16_t>{wire::kPull, wire::kHotPull, wire::kStats}));
  for (int fd : fds) {
    char c;
    while (::recv(fd, &c, 1, 0) > 0) {
    }
    ::close(fd);
  }
  ::close(lfd);
}

TEST(PsHotKeyBatch, HotPullsGoInsideTheReplicasBatch) {
  const Rows rows = pick_rows();
  ASSERT_TRUE(rows.x >= 0 && rows.y >= 0 && rows.z >= 0);
  braid::testing::expect_all_pass(2, [&](int rank, int, std::shared_ptr<braid::Store> store) {
    if (rank == 0) {
      run_fake_servers(*store, rows);
      return;
    }
    ps::WorkerOptions wo;
    wo.secret = kSecret;
    wo.timeout = 30s;
    ps::Worker worker(layout(), wo, store);
    ASSERT_EQ(worker.refresh_hot(), 1);
    std::vector<float> out(3 * kWidth, -1.0f);
    ps::StepRequest r;
    r.pull = {{0, {rows.x, rows.y, rows.z}, out.data()}};
    r.stats = true;
    std::vector<ps::ServerStats> stats;
    worker.step(r, &stats);
    EXPECT_EQ(stats.size(), 2u);
    EXPECT_EQ(out, (std::vector<float>{value(rows.x, 0), value(rows.x, 1), value(rows.y, 0),
                                       value(rows.y, 1), value(rows.z, 0), value(rows.z, 1)}));
  });
}

}  // namespace
