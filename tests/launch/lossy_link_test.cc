// braid over a slow, lossy wire between test hosts: node1's link given
// 5 ms of delay and 1% loss each way (support/emulated_wire.h, what `tc
// qdisc add ... netem delay 5ms loss 1%` on both ends of the link would do;
// this kernel has no netem):
//   * the wire does what it is asked: a round trip across it takes twice
//     the delay, and about 1% of its frames are dropped;
//   * every collective `braid bench` has still checks element by element;
//   * data-parallel training ends exactly as the clean run over the same
//     wire does, and equal to one process; both times are printed.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "support/host_launch.h"
#include "support/multiproc.h"
#include "support/test_hosts.h"
#include "support/tool.h"
#include "support/weights.h"

namespace {

using braid::testing::braid_bin;
using braid::testing::HostLaunch;
using braid::testing::launch_on_hosts;
using braid::testing::WireFaults;
using braid::testing::WireStats;
using namespace std::chrono_literals;

const WireFaults kClean{};
const WireFaults kSlowLossy{5ms, 0.01, 7};

// Starts `server` on node0, then runs `client` on node1, again while it
// fails for the first 5 s (the server may not listen yet). The client's
// status, its output in `out`; the server must end well within 60 s.
int serve_and_call(const braid::testing::TestHosts& hosts, const std::string& server,
                   const std::string& client, std::string* out) {
  const std::string dir = braid::testing::temp_dir("lossy_pair");
  auto srv = hosts.start(0, server, dir + "/server.out");
  int status = 1;
  for (int attempt = 0; attempt < 50 && status != 0; ++attempt) {
    std::this_thread::sleep_for(100ms);
    status = hosts.run(1, client, out);
  }
  EXPECT_EQ(srv.wait(std::chrono::steady_clock::now() + 60s), 0) << srv.output();
  return status;
}

// The median round trip of a byte between node1 and node0 over TCP, in ms
// (Python's sockets, so that nothing of braid's is on the path).
double median_rtt_ms(const braid::testing::TestHosts& hosts, int port) {
  const std::string server =
      "python3 -c \"import socket; s = socket.socket(); "
      "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('198.18.0.1', " +
      std::to_string(port) +
      ")); s.listen(1); s.settimeout(30); c, _ = s.accept(); "
      "c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)\n"
      "for _ in range(21): c.sendall(c.recv(1))\"";
  const std::string client =
      "python3 -c \"import socket, time; s = socket.create_connection(('198.18.0.1', " +
      std::to_string(port) +
      "), timeout=30); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1); r = []\n"
      "for _ in range(21): t = time.monotonic(); s.sendall(b'x'); s.recv(1); "
      "r.append(time.monotonic() - t)\n"
      "print(sorted(r)[10] * 1000)\"";
  std::string out;
  const int status = serve_and_call(hosts, server, client, &out);
  EXPECT_EQ(status, 0) << out;
  return status == 0 ? std::stod(out) : -1;
}

TEST(LossyLink, TheWireDelaysAndDropsAsAsked) {
  BRAID_TEST_HOSTS(hosts, 2);
  hosts->emulate_link(1, kClean);
  const double clean = median_rtt_ms(*hosts, 29611);
  hosts->emulate_link(1, kSlowLossy);
  const double slow = median_rtt_ms(*hosts, 29612);
  std::printf("median round trip: clean wire %.2f ms, 5 ms each way %.2f ms\n", clean, slow);
  EXPECT_LT(clean, 5.0);  // a loaded machine's wake-ups, not a delay
  EXPECT_GE(slow, 10.0);  // the wire holds each frame 5 ms each way
  EXPECT_LT(slow, 20.0 + clean);  // not twice the delay each way

  // Enough frames through the lossy wire to see its loss rate: 4 MiB each
  // way in 64 KiB writes.
  const WireStats before = hosts->wire_stats(1);
  std::string out;
  const std::string sink = "python3 -c \"import socket; s = socket.socket(); "
                           "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
                           "s.bind(('198.18.0.1', 29613)); s.listen(1); s.settimeout(60); "
                           "c, _ = s.accept(); n = 0\n"
                           "while n < (4 << 20): n += len(c.recv(1 << 16))\n"
                           "c.sendall(b'k')\"";
  const int status =
      serve_and_call(*hosts, sink,
                     "python3 -c \"import socket; s = socket.create_connection(('198.18.0.1', "
                     "29613), timeout=60)\n"
                     "for _ in range(64): s.sendall(bytes(1 << 16))\n"
                     "assert s.recv(1) == b'k'\"",
                     &out);
  ASSERT_EQ(status, 0) << out;
  const WireStats after = hosts->wire_stats(1);
  const double frames = double(after.frames - before.frames);
  const double rate = double(after.dropped - before.dropped) / frames;
  std::printf("4 MiB across: %.0f frames, %.2f%% dropped by the loss draw\n", frames, 100 * rate);
  ASSERT_GT(frames, 2500);  // 4 MiB in frames of at most 1514 bytes
  // 1% of n >= 2500 frames: three standard deviations either side.
  const double sd = std::sqrt(0.01 * 0.99 / frames);
  EXPECT_GT(rate, 0.01 - 3 * sd);
  EXPECT_LT(rate, 0.01 + 3 * sd);
}

// Every collective at 2 hosts × 1 rank over the slow, lossy wire: both
// launchers exit 0 and no element of any size is wrong.
TEST(LossyLink, EveryCollectiveChecksOverASlowLossyWire) {
  BRAID_TEST_HOSTS(hosts, 2);
  hosts->emulate_link(1, kSlowLossy);
  const std::string dir = braid::testing::temp_dir("lossy_bench");
  HostLaunch l = launch_on_hosts(*hosts, 1,
                                 braid_bin() + " bench --op all -b 8 -e 256K -f 8 --iters 2 --warmup 1",
                                 dir, 180s);
  const WireStats w = hosts->wire_stats(1);
  std::printf("every collective, 8 B to 256 KiB, over 5 ms + 1%% loss: %.1f s, %llu of %llu "
              "frames dropped\n",
              l.seconds, (unsigned long long)w.dropped, (unsigned long long)w.frames);
  ASSERT_EQ(l.status[0], 0) << l.all();
  ASSERT_EQ(l.status[1], 0) << l.all();
  EXPECT_NE(l.out[0].find("# OK: 0 wrong elements in total"), std::string::npos) << l.all();
  EXPECT_EQ(l.out[0].find("FAILED"), std::string::npos) << l.all();
  EXPECT_GT(w.dropped, 0u);  // the loss was there to survive
}

// Data-parallel training at 2 hosts × 1 rank, first over the clean wire,
// then over the same wire with 5 ms and 1% loss each way: both runs end as
// one process does, every loss and weight; the two times are printed.
TEST(LossyLink, TrainingOverASlowLossyWireEndsAsTheCleanRun) {
  BRAID_TEST_HOSTS(hosts, 2);
  const std::string dir = braid::testing::temp_dir("lossy_train");
  const std::string train = braid_bin() + " train mlp --steps 60 --batch 60 --threads 1 --quiet";
  std::string one_out;
  ASSERT_EQ(hosts->run(0, train + " --json-log " + dir + "/one.jsonl --checkpoint " + dir + "/one.ck",
                       &one_out),
            0)
      << one_out;
  const auto one = braid::testing::read_json_lines(dir + "/one.jsonl");
  double seconds[2] = {0, 0};
  for (int lossy = 0; lossy < 2; ++lossy) {
    hosts->emulate_link(1, lossy ? kSlowLossy : kClean);
    const WireStats before = hosts->wire_stats(1);
    const std::string run = dir + (lossy ? "/lossy" : "/clean");
    HostLaunch l = launch_on_hosts(*hosts, 1,
                                   train + " --json-log " + run + ".jsonl --checkpoint " + run + ".ck",
                                   dir, 240s);
    const WireStats w = hosts->wire_stats(1);
    seconds[lossy] = l.seconds;
    std::printf("%s wire: %.1f s, %llu frames, %llu dropped\n",
                lossy ? "5 ms + 1% loss" : "clean", l.seconds,
                (unsigned long long)(w.frames - before.frames),
                (unsigned long long)(w.dropped - before.dropped));
    ASSERT_EQ(l.status[0], 0) << l.all();
    ASSERT_EQ(l.status[1], 0) << l.all();
    const auto got = braid::testing::read_json_lines(run + ".jsonl");
    ASSERT_EQ(one.size(), got.size()) << l.all();
    const char* what = lossy ? "lossy wire" : "clean wire";
    braid::testing::expect_same_losses(one, got, what);
    braid::testing::expect_same_weights(dir + "/one.ck", run + ".ck", 1e-5, what);
    if (lossy) {
      EXPECT_GT(w.dropped - before.dropped, 0u);
    }
  }
  // Clean and lossy runs are the same computation, so their weights match
  // each other bit for bit, not only within the tolerance to one process.
  braid::testing::expect_same_weights(dir + "/clean.ck", dir + "/lossy.ck", 0.0, "clean vs lossy");
  std::printf("training, 2 hosts x 1 rank: clean %.1f s, 5 ms + 1%% loss %.1f s (%.2fx)\n",
              seconds[0], seconds[1], seconds[1] / seconds[0]);
}

}  // namespace
