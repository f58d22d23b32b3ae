// TCP store and bootstrap tests: real sockets, real threads, real processes.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <stdexcept>
#include <thread>

#include "braid/comm.h"
#include "braid/env.h"
#include "braid/error.h"
#include "braid/job.h"
#include "braid/store.h"
#include "comm/store/auth.h"
#include "comm/setup/bootstrap.h"
#include "support/multiproc.h"
#include "support/ports.h"

using namespace std::chrono_literals;
using braid::testing::free_port;
using braid::Bytes;
using braid::Errc;
using braid::Error;

namespace {

const std::string kSecret = "0123456789abcdef-test-secret";

Bytes B(const std::string& s) { return Bytes(s.begin(), s.end()); }
std::string S(const Bytes& b) { return std::string(b.begin(), b.end()); }

std::shared_ptr<braid::Store> client(int port, std::chrono::milliseconds timeout = 10s) {
  return braid::connect_tcp_store("127.0.0.1", port, kSecret, timeout);
}

// A TCP store server in a process of its own, for tests that fork ranks: a
// server thread in the forking process may hold a lock (libcrypto's, while
// it authenticates a rank forked earlier) at the moment of a later fork, and
// the child would wait on that lock forever.
class ServerProcess {
 public:
  explicit ServerProcess(const std::string& secret) {
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(fds[0]);
      braid::TcpStoreServer server("127.0.0.1", 0, secret);
      int port = server.port();
      if (::write(fds[1], &port, sizeof port) != sizeof port) ::_exit(1);
      for (;;) ::pause();  // until the test kills it
    }
    ::close(fds[1]);
    if (::read(fds[0], &port_, sizeof port_) != sizeof port_) port_ = -1;
    ::close(fds[0]);
  }
  ~ServerProcess() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  int port() const { return port_; }

 private:
  pid_t pid_ = -1;
  int port_ = -1;
};

int raw_connect(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// True if the server closes `fd` within `timeout` (reads and discards data).
bool closed_by_server(int fd, std::chrono::milliseconds timeout) {
  timeval tv{};
  tv.tv_sec = long(timeout.count() / 1000);
  tv.tv_usec = long((timeout.count() % 1000) * 1000);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char buf[256];
  for (;;) {
    ssize_t r = ::recv(fd, buf, sizeof buf, 0);
    if (r == 0) return true;
    if (r < 0) return errno == ECONNRESET;
  }
}

void expect_code(Errc code, const std::function<void()>& f, const std::string& needle = "") {
  try {
    f();
    ADD_FAILURE() << "expected Error(" << braid::errc_name(code) << ")";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    if (!needle.empty()) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
}

std::string tkey(int t, int i) {
  std::string k = "t";
  k += std::to_string(t);
  k += '/';
  k += std::to_string(i);
  return k;
}

// The server still serves a fresh client.
void expect_serving(int port) {
  auto c = client(port);
  c->set_str("alive", "yes");
  EXPECT_EQ(c->get_str("alive"), "yes");
}

}  // namespace

TEST(TcpStore, BasicOperations) {
  braid::TcpStoreServer server("127.0.0.1", 0, kSecret);
  ASSERT_GT(server.port(), 0);
  auto s = client(server.port());
  s->set("a", B("hello"));
  EXPECT_EQ(S(s->get("a")), "hello");
  s->set("a", B("again"));
  EXPECT_EQ(S(s->get("a")), "again");
  s->set("empty", {});
  EXPECT_TRUE(s->get("empty").empty());
  EXPECT_EQ(s->add("n", 5), 5);
  EXPECT_EQ(s->add("n", -2), 3);
  EXPECT_EQ(S(s->get("n")), "3");
  // compare_set: absent + empty expected sets; mismatch returns current.
  EXPECT_EQ(S(s->compare_set("c", {}, B("one"))), "one");
  EXPECT_EQ(S(s->compare_set("c", B("zzz"), B("two"))), "one");
  EXPECT_EQ(S(s->compare_set("c", B("one"), B("two"))), "two");
  EXPECT_TRUE(s->compare_set("absent", B("x"), B("y")).empty());
  EXPECT_FALSE(s->check("absent"));
  EXPECT_TRUE(s->check("c"));
  EXPECT_TRUE(s->remove("c"));
  EXPECT_FALSE(s->remove("c"));
  EXPECT_FALSE(s->check("c"));
  s->wait({"a", "n"}, 1s);
  s->wait({}, 1s);
  // Binary keys and a large value.
  std::string key("k\0\xff", 3);
  Bytes big(5 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = uint8_t(i * 7);
  s->set(key, big);
  EXPECT_EQ(s->get(key), big);
  // add on a non-integer value is the caller's error, and the connection survives.
  expect_code(Errc::kInvalidArgument, [&] { s->add("a", 1); }, "not an integer");
  EXPECT_EQ(s->add("n", 1), 4);
  // Limits are checked on the client side too.
  expect_code(Errc::kInvalidArgument, [&] { s->set(std::string(5000, 'k'), B("v")); });
}

TEST(TcpStore, GetAndWaitBlockUntilAnotherClientSets) {
  braid::TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto a = client(server.port());
  auto b = client(server.port());
  auto t0 = std::chrono::steady_clock::now();
  auto got = std::async(std::launch::async, [&] { return a->get_str("late"); });
  auto waited = std::async(std::launch::async, [&] { a->wait({"late", "later"}, 10s); });
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(got.wait_for(0ms), std::future_status::timeout);
  b->set_str("late", "v");
  EXPECT_EQ(got.get(), "v");
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 250ms);
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(waited.wait_for(0ms), std::future_status::timeout);
  b->set_str("later", "w");
  waited.get();
}

TEST(TcpStore, OneClientSharedByThreads) {
  braid::TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto s = client(server.port());
  // A get blocked on one thread must not stop a set on another thread of
  // the same client.
  auto got = std::async(std::launch::async, [&] { return s->get_str("x"); });
  std::this_thread::sleep_for(100ms);
  s->set_str("x", "from another thread");
  EXPECT_EQ(got.get(), "from another thread");

  constexpr int kThreads = 8, kIters = 200;
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < kIters; ++i) {
        s->add("counter", 1);
        s->set_str(tkey(t, i), std::to_string(i * t));
      }
      // Each thread reads another thread's keys (blocking until written).
      int o = (t + 1) % kThreads;
      for (int i = 0; i < kIters; i += 17)
        EXPECT_EQ(s->get_str(tkey(o, i)), std::to_string(i * o));
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(s->add("counter", 0), kThreads * kIters);
}

TEST(TcpStore, TimeoutNamesMissingKeys) {
  braid::TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto s = client(server.port());
  s->set_str("present", "1");
  auto t0 = std::chrono::steady_clock::now();
  try {
    s->wait({"present", "missing_one", "missing_two"}, 300ms);
    ADD_FAILURE() << "wait did not time out";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kTimeout);
    std::string m = e.what();
    EXPECT_NE(m.find("missing_one"), std::string::npos) << m;
    EXPECT_NE(m.find("missing_two"), std::string::npos) << m;
    EXPECT_EQ(m.find("present"), std::string::npos) << m;
  }
  auto dt = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(dt, 250ms);
  EXPECT_LT(dt, 5s);
  s->set_timeout(200ms);
  expect_code(Errc::kTimeout, [&] { s->get("nope"); }, "nope");
  // The connection is still good after timeouts.
  EXPECT_EQ(s->get_str("present"), "1");
}

TEST(TcpStore, ConnectRetriesUntilServerStarts) {
  int port = free_port();
  auto fut = std::async(std::launch::async, [&] { return client(port, 10s); });
  std::this_thread::sleep_for(400ms);
  braid::TcpStoreServer server("127.0.0.1", port, kSecret);
  auto s = fut.get();
  s->set_str("k", "v");
  EXPECT_EQ(s->get_str("k"), "v");
  // And gives up with a timeout naming the address when nobody listens.
  int dead_port = free_port();
  expect_code(Errc::kTimeout, [&] { client(dead_port, 300ms); },
              "127.0.0.1:" + std::to_string(dead_port));
}

TEST(TcpStore, WrongSecretIsRejectedAndOthersKeepWorking) {
  braid::TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto good = client(server.port());
  good->set_str("before", "1");
  auto blocked = std::async(std::launch::async, [&] { return good->get_str("after"); });
  expect_code(Errc::kAuth,
              [&] { braid::connect_tcp_store("127.0.0.1", server.port(), "wrong", 5s); });
  good->set_str("after", "2");
  EXPECT_EQ(blocked.get(), "2");
  expect_serving(server.port());
}

TEST(TcpStore, GarbageAndOversizedFramesAreDropped) {
  braid::TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto good = client(server.port());
  auto blocked = std::async(std::launch::async, [&] { return good->get_str("k"); });

  // 1. Garbage instead of a handshake.
  int g = raw_connect(server.port());
  ASSERT_GE(g, 0);
  std::string junk(4096, '\x5a');
  (void)!::send(g, junk.data(), junk.size(), MSG_NOSIGNAL);
  EXPECT_TRUE(closed_by_server(g, 5s));
  ::close(g);

  // 2. A client that connects and says nothing does not hold anyone up.
  int idle = raw_connect(server.port());
  ASSERT_GE(idle, 0);
  auto t0 = std::chrono::steady_clock::now();
  expect_serving(server.port());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);

  // 3. Authenticated, then an absurd frame length.
  int o = raw_connect(server.port());
  braid::comm::authenticate_connect(o, kSecret, 5s);
  uint8_t huge[4] = {0xff, 0xff, 0xff, 0xff};
  (void)!::send(o, huge, 4, MSG_NOSIGNAL);
  EXPECT_TRUE(closed_by_server(o, 5s));
  ::close(o);

  // 4. Authenticated, a frame whose key length points past its end.
  int m = raw_connect(server.port());
  braid::comm::authenticate_connect(m, kSecret, 5s);
  std::vector<uint8_t> f = {17, 0, 0, 0, /*id*/ 1, 0, 0, 0, 0, 0, 0, 0, /*op set*/ 1,
                            /*key len*/ 0xf0, 0xff, 0xff, 0x0f, 'a', 'b', 'c', 'd'};
  (void)!::send(m, f.data(), f.size(), MSG_NOSIGNAL);
  EXPECT_TRUE(closed_by_server(m, 5s));
  ::close(m);

  // 5. Authenticated, an unknown operation.
  int u = raw_connect(server.port());
  braid::comm::authenticate_connect(u, kSecret, 5s);
  std::vector<uint8_t> q = {9, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 99};
  (void)!::send(u, q.data(), q.size(), MSG_NOSIGNAL);
  EXPECT_TRUE(closed_by_server(u, 5s));
  ::close(u);

  // 6. A key over the 4 KiB limit, well formed otherwise.
  int k = raw_connect(server.port());
  braid::comm::authenticate_connect(k, kSecret, 5s);
  std::vector<uint8_t> body = {1, 0, 0, 0, 0, 0, 0, 0, 7};  // id 1, op check
  uint32_t klen = 5000;
  for (int i = 0; i < 4; ++i) body.push_back(uint8_t(klen >> (8 * i)));
  body.resize(body.size() + klen, 'k');
  std::vector<uint8_t> frame;
  for (int i = 0; i < 4; ++i) frame.push_back(uint8_t(body.size() >> (8 * i)));
  frame.insert(frame.end(), body.begin(), body.end());
  (void)!::send(k, frame.data(), frame.size(), MSG_NOSIGNAL);
  EXPECT_TRUE(closed_by_server(k, 5s));
  ::close(k);

  // The existing client, parked in a get all along, still gets its answer.
  expect_serving(server.port());
  good->set_str("k", "fine");
  EXPECT_EQ(blocked.get(), "fine");
  ::close(idle);
}

TEST(TcpStore, ClientSeesServerGoAway) {
  auto server = std::make_unique<braid::TcpStoreServer>("127.0.0.1", 0, kSecret);
  int port = server->port();
  auto s = client(port);
  s->set_str("k", "v");
  auto blocked = std::async(std::launch::async, [&] {
    try {
      s->get("never");
      return std::string("returned");
    } catch (const Error& e) {
      return std::string(braid::errc_name(e.code())) + ": " + e.what();
    }
  });
  std::this_thread::sleep_for(100ms);
  server.reset();
  std::string r = blocked.get();
  EXPECT_NE(r.find("closed the connection"), std::string::npos) << r;
  EXPECT_NE(r.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << r;
  expect_code(Errc::kPeerDied, [&] { s->set_str("k", "v"); }, "closed the connection");
}

TEST(TcpStore, ForkedProcessesRendezvous) {
  ServerProcess server(kSecret);
  int port = server.port();
  ASSERT_GT(port, 0);
  constexpr int n = 4;
  braid::testing::expect_all_pass(n, [port](int rank, int size, std::shared_ptr<braid::Store>) {
    auto s = client(port);
    EXPECT_EQ(s->add("arrived", 1) <= size, true);
    s->set_str("addr/" + std::to_string(rank), "rank" + std::to_string(rank));
    std::vector<std::string> keys;
    for (int r = 0; r < size; ++r) keys.push_back("addr/" + std::to_string(r));
    s->wait(keys, 20s);
    for (int r = 0; r < size; ++r) EXPECT_EQ(s->get_str(keys[size_t(r)]), "rank" + std::to_string(r));
    // Leader election through compare_set: exactly one winner.
    Bytes me = B(std::to_string(rank));
    Bytes now = s->compare_set("leader", {}, me);
    if (now == me) s->add("winners", 1);
    s->add("done", 1);
  }, 60s);
  auto s = client(port);
  EXPECT_EQ(s->add("arrived", 0), n);
  EXPECT_EQ(s->add("winners", 0), 1);
  EXPECT_EQ(s->add("done", 0), n);
}

TEST(JobSecret, RandomHex) {
  std::string a = braid::make_job_secret(), b = braid::make_job_secret();
  EXPECT_EQ(a.size(), 64u);
  EXPECT_NE(a, b);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
}

// With a member count, the last store to go removes the directory; a store
// opened after others have left still finds it; without one it stays.
TEST(FileStore, LastOfItsMembersRemovesTheDirectory) {
  const std::string dir = braid::testing::temp_dir("filestore") + "/job";
  auto a = braid::make_file_store(dir, 3);
  auto b = braid::make_file_store(dir, 3);
  a->set_str("k", "v");
  a.reset();
  EXPECT_TRUE(std::filesystem::exists(dir)) << "removed after 1 of 3 left";
  auto c = braid::make_file_store(dir, 3);  // a late member
  EXPECT_EQ(c->get_str("k"), "v");
  b.reset();
  EXPECT_TRUE(std::filesystem::exists(dir)) << "removed after 2 of 3 left";
  c.reset();
  EXPECT_FALSE(std::filesystem::exists(dir)) << "still there after all 3 left";

  auto keep = braid::make_file_store(dir);
  keep->set_str("k", "v");
  keep.reset();
  EXPECT_TRUE(std::filesystem::exists(dir + "/k_6b"));
  EXPECT_THROW(braid::make_file_store(dir, -1), braid::Error);
}

// ---- bootstrap ------------------------------------------------------------

namespace {

const char* kAllVars[] = {
    "BRAID_RANK", "BRAID_WORLD_SIZE", "BRAID_LOCAL_RANK", "BRAID_LOCAL_WORLD_SIZE",
    "BRAID_NODE_RANK", "BRAID_STORE", "BRAID_SECRET", "BRAID_HOST_STORE", "BRAID_STORE_PORT",
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
    "MASTER_PORT", "TORCHELASTIC_RUN_ID", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_MCA_ess_base_jobid",
    "OMPI_MCA_orte_ess_jobid", "PMIX_NAMESPACE", "PMIX_ID", "OMPI_MCA_orte_hnp_uri",
    "SLURM_PROCID", "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_LOCALID", "SLURM_NODEID",
    "SLURM_TASKS_PER_NODE", "SLURM_STEP_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE",
    "SLURM_NODELIST", "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_JOB_ID",
    "SLURM_JOBID", "SLURM_STEP_ID", "SLURM_STEPID"};

void clear_job_env() {
  for (const char* v : kAllVars) ::unsetenv(v);
}
void put(const char* k, const std::string& v) { ::setenv(k, v.c_str(), 1); }

// Every rank publishes its view and checks everyone else's; rank 0 (which
// may host the store) leaves last.
void check_job(const braid::comm::JobEnv& env, int rank, int size, const std::string& source) {
  // launched_job reads the same environment by the same rules, connecting
  // to nothing.
  const braid::LaunchedJob job = braid::launched_job();
  EXPECT_EQ(job.launcher, source);
  EXPECT_EQ(job.rank, rank);
  EXPECT_EQ(job.size, size);
  EXPECT_EQ(env.source, source);
  EXPECT_EQ(env.rank, rank);
  EXPECT_EQ(env.size, size);
  EXPECT_EQ(env.local_rank, rank);
  EXPECT_EQ(env.local_size, size);
  EXPECT_EQ(env.node_rank, 0);
  ASSERT_TRUE(env.store);
  EXPECT_FALSE(env.secret.empty());
  env.store->set_str("view/" + std::to_string(rank), source + "/" + env.secret);
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back("view/" + std::to_string(r));
  env.store->wait(keys, 20s);
  for (auto& k : keys) EXPECT_EQ(env.store->get_str(k), source + "/" + env.secret);
  env.store->set_str("left/" + std::to_string(rank), "1");
  if (rank == 0) {
    std::vector<std::string> left;
    for (int r = 0; r < size; ++r) left.push_back("left/" + std::to_string(r));
    env.store->wait(left, 20s);
  }
}

}  // namespace

TEST(Bootstrap, LaunchedJobReadsTheLaunchersVariablesOnly) {
  clear_job_env();
  braid::LaunchedJob job = braid::launched_job();
  EXPECT_EQ(job.launcher, "single");
  EXPECT_EQ(job.rank, 0);
  EXPECT_EQ(job.size, 1);
  put("WORLD_SIZE", "4");  // torchrun sets RANK too: alone, no launcher
  EXPECT_EQ(braid::launched_job().launcher, "single");
  put("RANK", "3");
  job = braid::launched_job();
  EXPECT_EQ(job.launcher, "torchrun");
  EXPECT_EQ(job.rank, 3);
  EXPECT_EQ(job.size, 4);
  put("BRAID_RANK", "1");  // braid run's variables come first
  put("BRAID_WORLD_SIZE", "2");
  job = braid::launched_job();
  EXPECT_EQ(job.launcher, "braid");
  EXPECT_EQ(job.rank, 1);
  EXPECT_EQ(job.size, 2);
  put("BRAID_RANK", "2");
  try {
    braid::launched_job();
    ADD_FAILURE() << "BRAID_RANK=2 of BRAID_WORLD_SIZE=2 accepted";
  } catch (const braid::Error& e) {
    EXPECT_EQ(e.code(), braid::Errc::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("BRAID_RANK=2 is not below BRAID_WORLD_SIZE=2"),
              std::string::npos)
        << e.what();
  }
  clear_job_env();
  put("SLURM_PROCID", "5");
  put("SLURM_NPROCS", "8");  // older Slurm's name for the size
  job = braid::launched_job();
  EXPECT_EQ(job.launcher, "slurm");
  EXPECT_EQ(job.rank, 5);
  EXPECT_EQ(job.size, 8);
  clear_job_env();
}

TEST(Bootstrap, Braid) {
  std::string secret = braid::make_job_secret();
  ServerProcess server(secret);
  ASSERT_GT(server.port(), 0);
  std::string addr = "127.0.0.1:" + std::to_string(server.port());
  braid::testing::expect_all_pass(3, [&](int rank, int size, std::shared_ptr<braid::Store>) {
    clear_job_env();
    put("BRAID_RANK", std::to_string(rank));
    put("BRAID_WORLD_SIZE", std::to_string(size));
    put("BRAID_LOCAL_RANK", std::to_string(rank));
    put("BRAID_LOCAL_WORLD_SIZE", std::to_string(size));
    put("BRAID_NODE_RANK", "0");
    put("BRAID_STORE", addr);
    put("BRAID_SECRET", secret);
    auto env = braid::comm::bootstrap_from_env(10s);
    EXPECT_FALSE(env.server);
    EXPECT_EQ(env.secret, secret);
    check_job(env, rank, size, "braid");
  }, 60s);
}

TEST(Bootstrap, Torchrun) {
  int port = free_port(/*pair=*/true);
  braid::testing::expect_all_pass(3, [&](int rank, int size, std::shared_ptr<braid::Store>) {
    clear_job_env();
    put("RANK", std::to_string(rank));
    put("WORLD_SIZE", std::to_string(size));
    put("LOCAL_RANK", std::to_string(rank));
    put("LOCAL_WORLD_SIZE", std::to_string(size));
    put("GROUP_RANK", "0");
    put("MASTER_ADDR", "127.0.0.1");
    put("MASTER_PORT", std::to_string(port));
    put("TORCHELASTIC_RUN_ID", "test-run");
    auto env = braid::comm::bootstrap_from_env(10s);
    EXPECT_EQ(bool(env.server), rank == 0);
    if (env.server) {
      EXPECT_EQ(env.server->port(), port + 1);
    }
    check_job(env, rank, size, "torchrun");
  }, 60s);
}

// The store server rank 0 hosts for a job joined with from_env lives while
// any communicator on that store does: a split keeps it after the
// application drops the world (CommImpl's store_host).
TEST(Bootstrap, SplitKeepsTheHostedStoreAfterTheWorldIsDropped) {
  int port = free_port(/*pair=*/true);
  braid::testing::expect_all_pass(3, [&](int rank, int size, std::shared_ptr<braid::Store>) {
    clear_job_env();
    put("RANK", std::to_string(rank));
    put("WORLD_SIZE", std::to_string(size));
    put("MASTER_ADDR", "127.0.0.1");
    put("MASTER_PORT", std::to_string(port));
    put("BRAID_SECRET", "store-host-test");
    braid::CommOptions opt;
    opt.timeout = 20s;
    auto world = braid::Communicator::from_env(opt);
    auto sub = world->split(0, rank);
    world.reset();  // on rank 0, the last holder but `sub` of the server
    // A split sets up its transport through the store: every rank needs
    // rank 0's server still serving.
    auto again = sub->split(0, -rank);
    ASSERT_TRUE(again);
    std::vector<int32_t> v(1000, rank + 1);
    again->all_reduce(v.data(), v.data(), v.size(), braid::DType::kI32, braid::ReduceOp::kSum);
    EXPECT_EQ(v[0], 6);
    EXPECT_EQ(v[999], 6);
    again->barrier();
  }, 60s);
}

TEST(Bootstrap, OpenMpiSingleHostFileStore) {
  std::string job = "test" + std::to_string(::getpid()) + "_" + std::to_string(braid::now_ns());
  const std::string note = braid::testing::temp_dir("mpistore") + "/dir";
  braid::testing::expect_all_pass(3, [&](int rank, int size, std::shared_ptr<braid::Store>) {
    clear_job_env();
    put("OMPI_COMM_WORLD_RANK", std::to_string(rank));
    put("OMPI_COMM_WORLD_SIZE", std::to_string(size));
    put("OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(rank));
    put("OMPI_COMM_WORLD_LOCAL_SIZE", std::to_string(size));
    put("OMPI_MCA_ess_base_jobid", job);
    auto env = braid::comm::bootstrap_from_env(10s);
    EXPECT_FALSE(env.server);
    check_job(env, rank, size, "mpirun");
    if (rank == 0) {
      // This job's directory is the one whose view/0 (hex key) holds this
      // job's secret; it must outlive rank 0's check and go with its store.
      const std::string prefix = "braid_store_" + std::to_string(::getuid()) + "_";
      const std::string want = "mpirun/" + env.secret;
      for (auto& e : std::filesystem::directory_iterator("/tmp")) {
        if (e.path().filename().string().rfind(prefix, 0) != 0) continue;
        std::ifstream f(e.path() / "k_766965772f30");
        std::string v((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
        if (v == want) std::ofstream(note) << e.path().string();
      }
    }
  }, 60s);
  std::ifstream f(note);
  std::string dir((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(dir.empty()) << "rank 0 did not find the job's store directory";
  EXPECT_FALSE(std::filesystem::exists(dir)) << dir << " outlived the job's ranks";
}

TEST(Bootstrap, OpenMpiWithMasterAddress) {
  int port = free_port();
  braid::testing::expect_all_pass(2, [&](int rank, int size, std::shared_ptr<braid::Store>) {
    clear_job_env();
    put("OMPI_COMM_WORLD_RANK", std::to_string(rank));
    put("OMPI_COMM_WORLD_SIZE", std::to_string(size));
    put("OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(rank));
    put("OMPI_COMM_WORLD_LOCAL_SIZE", std::to_string(size));
    put("MASTER_ADDR", "127.0.0.1");
    put("MASTER_PORT", std::to_string(port));
    put("BRAID_SECRET", "shared-by-hand");
    auto env = braid::comm::bootstrap_from_env(10s);
    EXPECT_EQ(bool(env.server), rank == 0);
    EXPECT_EQ(env.secret, "shared-by-hand");
    check_job(env, rank, size, "mpirun");
  }, 60s);
}

TEST(Bootstrap, Slurm) {
  int port = free_port();
  braid::testing::expect_all_pass(3, [&](int rank, int size, std::shared_ptr<braid::Store>) {
    clear_job_env();
    put("SLURM_PROCID", std::to_string(rank));
    put("SLURM_NTASKS", std::to_string(size));
    put("SLURM_LOCALID", std::to_string(rank));
    put("SLURM_NODEID", "0");
    put("SLURM_TASKS_PER_NODE", std::to_string(size) + "(x1)");
    put("SLURM_STEP_NODELIST", "localhost");
    put("SLURM_JOB_ID", "4242");
    put("BRAID_STORE_PORT", std::to_string(port));
    auto env = braid::comm::bootstrap_from_env(10s);
    EXPECT_EQ(bool(env.server), rank == 0);
    check_job(env, rank, size, "slurm");
  }, 60s);
}

TEST(Bootstrap, SingleProcess) {
  braid::testing::expect_all_pass(1, [&](int, int, std::shared_ptr<braid::Store>) {
    clear_job_env();
    auto env = braid::comm::bootstrap_from_env(5s);
    EXPECT_EQ(env.source, "single");
    EXPECT_EQ(env.rank, 0);
    EXPECT_EQ(env.size, 1);
    ASSERT_TRUE(env.store);
    env.store->set_str("k", "v");
    EXPECT_EQ(env.store->get_str("k"), "v");
    EXPECT_EQ(env.store->add("n", 2), 2);
    expect_code(Errc::kTimeout, [&] { env.store->wait({"absent"}, 50ms); }, "absent");
  }, 30s);
}

TEST(Bootstrap, BadValuesNameTheVariable) {
  struct Case {
    std::vector<std::pair<const char*, const char*>> vars;
    const char* needle;
  };
  std::vector<Case> cases = {
      {{{"RANK", "0"}, {"WORLD_SIZE", "0"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}}, "WORLD_SIZE"},
      {{{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}}, "RANK"},
      {{{"RANK", "abc"}, {"WORLD_SIZE", "2"}}, "RANK"},
      {{{"RANK", "-1"}, {"WORLD_SIZE", "2"}}, "RANK"},
      {{{"BRAID_RANK", "0"}, {"BRAID_WORLD_SIZE", "2x"}}, "BRAID_WORLD_SIZE"},
      {{{"BRAID_RANK", "0"}, {"BRAID_WORLD_SIZE", "2"}, {"BRAID_STORE", "nohostport"}}, "BRAID_STORE"},
      {{{"BRAID_RANK", "0"}, {"BRAID_WORLD_SIZE", "2"}, {"BRAID_STORE", "h:99999"}}, "BRAID_STORE"},
      {{{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "2"}}, "OMPI_COMM_WORLD_RANK"},
      {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "0"}}, "SLURM_NTASKS"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "x"}}, "MASTER_PORT"},
  };
  for (auto& c : cases) {
    braid::testing::expect_all_pass(1, [&](int, int, std::shared_ptr<braid::Store>) {
      clear_job_env();
      for (auto& [k, v] : c.vars) put(k, v);
      expect_code(Errc::kInvalidArgument, [] { braid::comm::bootstrap_from_env(1s); }, c.needle);
    }, 30s);
  }
}

TEST(Bootstrap, Parsers) {
  using braid::comm::first_slurm_host;
  using braid::comm::parse_host_port;
  EXPECT_EQ(first_slurm_host("node[01-04,07],gpu[1-2]"), "node01");
  EXPECT_EQ(first_slurm_host("a,b,c"), "a");
  EXPECT_EQ(first_slurm_host("single"), "single");
  EXPECT_EQ(first_slurm_host("rack1-n[3,5]"), "rack1-n3");
  EXPECT_EQ(parse_host_port("10.0.0.1:29500", "X"), std::make_pair(std::string("10.0.0.1"), 29500));
  EXPECT_EQ(parse_host_port("[::1]:80", "X"), std::make_pair(std::string("::1"), 80));
  expect_code(Errc::kInvalidArgument, [] { parse_host_port(":80", "X"); }, "X");
}
