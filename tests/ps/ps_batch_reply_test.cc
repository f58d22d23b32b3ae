// A worker refuses a malformed reply to a batch (wire.h kBatch), in real
// processes: a fake server speaks the frame protocol, answers the hello,
// reads the worker's batch and answers it with crafted bytes. Each case must
// fail the worker's step with kProtocol and a message naming what was wrong
// (out of order, overrun, wrong length, bytes left over, past the bound),
// never write past a destination or wait for bytes that will not come.
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

const std::string kSecret = "ps-batch-reply-test-secret-01234";

ps::Layout layout() {
  ps::Layout l(1);
  l.add_dense("w", 6);
  return l;
}

// How the fake server spoils its reply to a batch of (pull of w, stats).
enum class Spoil {
  kSubRequestId,    // the pull's reply names another request
  kSubOverrun,      // the pull's reply claims more bytes than the batch has left
  kSubLength,       // the pull's reply carries 20 bytes, not 24
  kTrailing,        // 8 bytes after the last sub-reply
  kShort,           // the batch ends after the first sub-reply
  kPastBound,       // the batch claims 1 TiB
  kBatchRequestId,  // the batch reply answers another request
};
constexpr int kCases = 7;

void append(std::vector<uint8_t>& out, const void* p, size_t n) {
  if (n == 0) return;  // p may be an empty vector's null data()
  const size_t at = out.size();
  out.resize(at + n);
  std::memcpy(out.data() + at, p, n);
}

// Serves one worker connection: hello, then one batch answered as `how`
// says; returns when the worker closes the connection.
void serve_spoiled(int fd, Spoil how) {
  const int64_t deadline = wire::deadline_after(30s);
  braid::comm::authenticate_accept(fd, kSecret, 10s);
  wire::Header hello = wire::recv_header(fd, deadline, "hello");
  hello.op |= wire::kReply;
  wire::send_frame(fd, hello, nullptr, deadline, "hello reply");

  const wire::Header batch = wire::recv_header(fd, deadline, "batch");
  ASSERT_EQ(batch.op, wire::kBatch);
  ASSERT_EQ(batch.count, 2u);
  std::vector<uint8_t> in(batch.payload);
  wire::recv_payload(fd, in.data(), in.size(), deadline, "batch payload");
  wire::Header pull, stats;
  std::memcpy(&pull, in.data(), sizeof pull);
  std::memcpy(&stats, in.data() + sizeof pull + pull.payload, sizeof stats);
  ASSERT_EQ(pull.op, wire::kPull);
  ASSERT_EQ(stats.op, wire::kStats);

  std::vector<float> values(6, 1.0f);
  std::vector<uint8_t> stats_bytes;
  wire::encode_stats(ps::ServerStats{}, stats_bytes);
  wire::Header pr = pull, sr = stats;
  pr.op |= wire::kReply;
  sr.op |= wire::kReply;
  pr.payload = 24;
  sr.payload = stats_bytes.size();
  if (how == Spoil::kSubRequestId) pr.req += 100;
  if (how == Spoil::kSubLength) pr.payload = 20;
  if (how == Spoil::kSubOverrun) pr.payload = 1 << 20;

  std::vector<uint8_t> body;
  append(body, &pr, sizeof pr);
  append(body, values.data(), how == Spoil::kSubLength ? 20 : 24);
  if (how != Spoil::kShort) {
    append(body, &sr, sizeof sr);
    append(body, stats_bytes.data(), stats_bytes.size());
  }
  if (how == Spoil::kTrailing) body.resize(body.size() + 8, 0);
  wire::Header r = batch;
  r.op |= wire::kReply;
  r.payload = how == Spoil::kPastBound ? uint64_t(1) << 40 : body.size();
  if (how == Spoil::kBatchRequestId) r.req += 1;
  // One send: the worker may close the connection as soon as it has read
  // the header, and a second send could then fail.
  std::vector<uint8_t> reply;
  append(reply, &r, sizeof r);
  append(reply, body.data(), body.size());
  braid::comm::write_full(fd, reply.data(), reply.size(), deadline, "batch reply");
  char c;
  while (::recv(fd, &c, 1, 0) > 0) {
  }
}

TEST(PsBatchReply, MalformedRepliesFailTheStepWithAClearError) {
  braid::testing::expect_all_pass(2, [](int rank, int, std::shared_ptr<braid::Store> store) {
    if (rank == 0) {
      int port = 0;
      const int lfd = ps::listen_tcp("127.0.0.1", &port);
      store->set_str("ps/server/0", "127.0.0.1:" + std::to_string(port));
      for (int c = 0; c < kCases; ++c) {
        while (!ps::wait_readable(lfd, 100)) {
        }
        const int fd = ps::accept_tcp(lfd);
        ASSERT_GE(fd, 0);
        serve_spoiled(fd, Spoil(c));
        ::close(fd);
      }
      ::close(lfd);
      return;
    }
    const char* words[kCases] = {
        "malformed reply inside a batch",  // kSubRequestId
        "malformed reply inside a batch",  // kSubOverrun
        "reply of 20 bytes, expected 24",  // kSubLength
        "8 bytes after the last reply",    // kTrailing
        "reply ends before the reply to its parameter-server worker 0, server 0, stats",
        "sub-frames (at most",             // kPastBound
        "reply out of order",              // kBatchRequestId
    };
    ps::WorkerOptions wo;
    wo.secret = kSecret;
    wo.timeout = 30s;
    for (int c = 0; c < kCases; ++c) {
      SCOPED_TRACE("case " + std::to_string(c));
      ps::Worker worker(layout(), wo, store);
      std::vector<float> w(6, -1.0f);
      ps::StepRequest r;
      r.pull = {{0, {}, w.data()}};
      r.stats = true;
      try {
        worker.step(r);
        ADD_FAILURE() << "a spoiled batch reply was accepted";
      } catch (const braid::Error& e) {
        EXPECT_EQ(e.code(), braid::Errc::kProtocol);
        EXPECT_NE(std::string(e.what()).find(words[c]), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("parameter-server worker 0, server 0"),
                  std::string::npos)
            << e.what();
      }
    }
  });
}

}  // namespace
