// Hostile traffic on every port a running job listens on. A 4-rank data
// parallel job (`braid run -n 4 -- braid train`, TCP transport) and a
// parameter-server job (`braid run -n 4 -- braid ps train`, 2 servers and
// 2 workers, BSP) run while this
// test finds their listening sockets (the inodes of the jobs' own
// processes' sockets, /proc/<pid>/fd, matched in /proc/net/tcp: the store,
// the transport while it sets up, the parameter servers) and sends each
// port, from 127.0.0.1:
//   - garbage; a huge-length frame header (store: u32 0xffffffff; ps: a
//     header whose payload is 2^62 bytes), unauthenticated, and the same
//     after proving the job secret (the test sets BRAID_SECRET), which
//     only a length check stops;
//   - a valid store request (set a key) behind a made-up proof;
//   - a half-finished handshake held open (slowloris);
//   - a handshake made with another job's secret (a replayed handshake
//     cannot pass: each side's nonce is fresh, so the proof of another
//     secret, or of an old nonce, fails alike);
//   - 1,000 connections at once (fewer if the fd limit is lower).
// Expected: each offender dropped within a bound (the servers' 10 s
// handshake deadline, plus slack); the unauthenticated set never lands;
// both jobs exit 0 with the losses and final weights of an undisturbed run,
// bit for bit; the jobs' processes' descriptors stay bounded; and the
// jobs' logs stay bounded (rate-limited) however many connections fail.
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "braid/checkpoint.h"
#include "braid/env.h"
#include "braid/error.h"
#include "braid/store.h"
#include "comm/store/auth.h"
#include "comm/store/tcp_store_wire.h"
#include "ps/io/socket.h"
#include "ps/io/wire.h"
#include "support/multiproc.h"
#include "support/tool.h"

namespace {

using namespace std::chrono_literals;
using braid::testing::braid_bin;

const std::string kSecret = "hostile-test-job-secret-5f2c";
const std::string kDp = " train mlp --steps 300 --batch 60 --threads 1 --quiet";
const std::string kPs = " ps train mlp --steps 300 --batch 60 --threads 1 --quiet --servers 2 --workers 2 --consistency bsp";

pid_t spawn(const std::string& cmd, const std::string& out) {
  pid_t p = ::fork();
  if (p == 0) {
    ::setenv("BRAID_SECRET", kSecret.c_str(), 1);
    ::setenv("BRAID_TCP_ADDR", "127.0.0.1", 1);  // every listener on loopback, where the test attacks
    ::execl("/bin/sh", "sh", "-c", (cmd + " >" + out + " 2>&1").c_str(), (char*)nullptr);
    ::_exit(127);
  }
  return p;
}

// pid and its descendants.
std::set<pid_t> family(pid_t root) {
  std::map<pid_t, pid_t> parent;
  if (DIR* d = ::opendir("/proc")) {
    while (dirent* e = ::readdir(d)) {
      pid_t p = std::atoi(e->d_name);
      if (p <= 0) continue;
      std::ifstream f("/proc/" + std::string(e->d_name) + "/stat");
      std::string s;
      std::getline(f, s);
      size_t rp = s.rfind(')');
      if (rp == std::string::npos) continue;
      std::istringstream is(s.substr(rp + 2));
      char state;
      pid_t pp;
      is >> state >> pp;
      parent[p] = pp;
    }
    ::closedir(d);
  }
  std::set<pid_t> out{root};
  for (bool grew = true; grew;) {
    grew = false;
    for (auto [p, pp] : parent)
      if (out.count(pp) && !out.count(p)) grew = out.insert(p).second || grew;
  }
  return out;
}

size_t fd_count(pid_t p) {
  size_t n = 0;
  if (DIR* d = ::opendir(("/proc/" + std::to_string(p) + "/fd").c_str())) {
    while (dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
    ::closedir(d);
  }
  return n;
}

// Listening TCP ports (IPv4) of the processes in `pids`, each with its
// owner's command line.
std::map<int, std::string> listening_ports(const std::set<pid_t>& pids) {
  std::map<std::string, pid_t> inodes;
  for (pid_t p : pids) {
    const std::string dir = "/proc/" + std::to_string(p) + "/fd";
    if (DIR* d = ::opendir(dir.c_str())) {
      while (dirent* e = ::readdir(d)) {
        char buf[64];
        ssize_t n = ::readlink((dir + "/" + e->d_name).c_str(), buf, sizeof buf - 1);
        if (n <= 0) continue;
        buf[n] = 0;
        if (std::strncmp(buf, "socket:[", 8) == 0) inodes[std::string(buf + 8, size_t(n) - 9)] = p;
      }
      ::closedir(d);
    }
  }
  std::map<int, std::string> ports;
  std::ifstream f("/proc/net/tcp");
  std::string line;
  std::getline(f, line);
  while (std::getline(f, line)) {
    std::istringstream is(line);
    std::string sl, local, remote, st, q, tr, rt, uid, to, inode;
    is >> sl >> local >> remote >> st >> q >> tr >> rt >> uid >> to >> inode;
    if (st != "0A" || !inodes.count(inode)) continue;
    std::ifstream c("/proc/" + std::to_string(inodes[inode]) + "/cmdline");
    std::string cmd((std::istreambuf_iterator<char>(c)), std::istreambuf_iterator<char>());
    for (char& ch : cmd) ch = ch ? ch : ' ';
    ports[std::stoi(local.substr(local.find(':') + 1), nullptr, 16)] = cmd.substr(0, 120);
  }
  return ports;
}

// A connection to 127.0.0.1:port, or -1 (the listener is gone).
int dial(int port) {
  try {
    return braid::ps::connect_tcp("127.0.0.1", port, 1s, "hostile test");
  } catch (const braid::Error&) {
    return -1;
  }
}

void send_all(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = ::send(fd, c, n, MSG_NOSIGNAL);
    if (w <= 0) return;
    c += w;
    n -= size_t(w);
  }
}

// Seconds until the peer closes fd (reading and discarding), or -1 past `limit`.
double seconds_to_close(int fd, std::chrono::seconds limit) {
  const auto t0 = std::chrono::steady_clock::now();
  char buf[4096];
  timeval tv{0, 200000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  while (std::chrono::steady_clock::now() - t0 < limit) {
    ssize_t r = ::recv(fd, buf, sizeof buf, 0);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return -1;
}

struct Findings {
  std::mutex mu;
  std::vector<std::string> failures;
  int attacks = 0;
  int stores_checked = 0;  // ports found to be a job's store
  int authed = 0;          // ports the huge-length attack reached after the handshake
  std::string not_stores;  // why each port asked as a store did not answer as one
  int store_length_drops = 0;  // stores seen dropping a huge length while their job ran
  void fail(const std::string& s) {
    std::lock_guard<std::mutex> l(mu);
    failures.push_back(s);
  }
};

constexpr auto kDropWithin = 15s;  // the servers' 10 s handshake deadline, plus slack

// Every attack on one port; each offender must be dropped within kDropWithin.
void attack(int port, const std::string& owner, Findings& fs) {
  const std::string at = "port " + std::to_string(port) + " (" + owner + "): ";
  // Returns whether the port still listened right after the drop: then the
  // drop was the server's doing, not its job's exit.
  auto expect_dropped = [&](int fd, const std::string& what) {
    if (fd < 0) return false;  // the listener is gone (the transport's, after set-up)
    const double s = seconds_to_close(fd, kDropWithin);
    if (s < 0) fs.fail(at + what + ": still open after 15 s");
    ::close(fd);
    const int probe = s < 0 ? -1 : dial(port);
    if (probe >= 0) ::close(probe);
    std::lock_guard<std::mutex> l(fs.mu);
    ++fs.attacks;
    return probe >= 0;
  };
  // A job's store lives in its launcher (`braid run`).
  const bool store_port = owner.rfind(braid_bin() + " run ", 0) == 0;
  // If this port is a job's store, it still answers (so every drop was the
  // server's doing, not its job's exit) and never applied the request sent
  // without the handshake. Not a store (a parameter server, or the
  // transport refusing a store request) or a job that has ended: no answer.
  // `looks`: times it asks, 100 ms apart (a request just sent may take a
  // moment to be applied).
  auto ask_store = [&](bool count, int looks) {
    try {
      auto store = braid::connect_tcp_store("127.0.0.1", port, kSecret, 3s);
      store->set_timeout(3s);
      for (int i = 0; i < looks; ++i) {
        if (i) std::this_thread::sleep_for(100ms);
        if (store->check("hostile/unauthenticated")) {
          fs.fail(at + "the store applied a request sent without the handshake");
          break;
        }
      }
      std::lock_guard<std::mutex> l(fs.mu);
      if (count) ++fs.stores_checked;
    } catch (const braid::Error& e) {
      std::lock_guard<std::mutex> l(fs.mu);
      fs.not_stores += at + e.what() + "\n";
    }
  };
  std::mt19937 gen{uint32_t(port)};
  {  // the job's own secret, then a huge length (only a length check stops it)
    // Retried while the flood fills the server's handshake slots, as the
    // job's own clients do.
    int fd = -1;
    try {
      fd = braid::ps::connect_authenticated("127.0.0.1", port, kSecret, 12s, "hostile test");
    } catch (const braid::Error&) {
    }
    if (fd >= 0) {
      // A parameter server's hello of a 2^62-byte payload. A store reads
      // its first 4 bytes (the frame magic) as a frame length of 789 MiB;
      // a TCP transport, as a hello of no known job. Each is a length or
      // identity check's to refuse, at once.
      braid::ps::wire::Header h;
      h.op = braid::ps::wire::kHello;
      h.payload = uint64_t(1) << 62;
      send_all(fd, &h, sizeof h);
    }
    if (fd >= 0) {
      std::lock_guard<std::mutex> l(fs.mu);
      ++fs.authed;
    }
    // A length check drops it at once, while its job runs; a store without
    // one would hold it until the job's exit closed it.
    if (expect_dropped(fd, "huge length after the handshake") && store_port) {
      std::lock_guard<std::mutex> l(fs.mu);
      ++fs.store_length_drops;
    } else if (fd >= 0 && store_port) {
      fs.fail(at + "huge length after the handshake: the store did not drop it while its job ran");
    }
  }
  {  // garbage
    int fd = dial(port);
    std::vector<uint8_t> junk(4096);
    for (auto& b : junk) b = uint8_t(gen());
    if (fd >= 0) send_all(fd, junk.data(), junk.size());
    expect_dropped(fd, "garbage");
  }
  {  // a huge length before the handshake
    int fd = dial(port);
    uint8_t hdr[64];
    std::memset(hdr, 0xff, sizeof hdr);
    if (fd >= 0) send_all(fd, hdr, sizeof hdr);
    expect_dropped(fd, "huge length, unauthenticated");
  }
  {  // a valid store request behind a made-up proof: the server's own
     // handshake hello (magic and nonce) sent back, a MAC of no secret,
     // then a request to set hostile/unauthenticated
    // Retried, as the job's own clients do, until the server's hello
    // arrives: while the flood fills its handshake slots it closes new
    // connections at once, and a request that never reached a handshake
    // would test nothing (a store that let it in would go unseen).
    using namespace braid::comm::store_wire;
    std::vector<uint8_t> f(36 + 32, 0x42);  // hello (u32 magic, 32-byte nonce), MAC
    int fd = -1;
    for (const auto until = std::chrono::steady_clock::now() + 12s; fd < 0 && std::chrono::steady_clock::now() < until;) {
      fd = dial(port);
      if (fd < 0) break;  // the listener is gone
      try {
        braid::comm::read_full(fd, f.data(), 36, braid::now_ns() + 5'000'000'000ull, "hello");
      } catch (const braid::Error&) {
        ::close(fd);
        fd = -1;
        std::this_thread::sleep_for(20ms);
      }
    }
    std::vector<uint8_t> frame = begin_frame();
    const size_t at_frame = f.size();
    f.insert(f.end(), frame.begin(), frame.end());
    put_u64(f, 1);
    f.push_back(kSet);
    put_str(f, "hostile/unauthenticated");
    put_str(f, "1");
    const uint32_t body = uint32_t(f.size() - at_frame - 4);
    for (size_t i = 0; i < 4; ++i) f[at_frame + i] = uint8_t(body >> (8 * i));  // as finish_frame
    if (fd >= 0) send_all(fd, f.data(), f.size());
    // Asked while the connection is still open (a store that let it in
    // keeps it, and its job may end before the drop's deadline), and while
    // the job surely runs: the slow attacks below each wait out the
    // servers' 10 s handshake deadline.
    if (fd >= 0) ask_store(true, 10);
    expect_dropped(fd, "store request without the handshake");
  }
  {  // slowloris: half a nonce, then silence
    int fd = dial(port);
    uint8_t half[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    if (fd >= 0) send_all(fd, half, sizeof half);
    expect_dropped(fd, "half a handshake held open");
  }
  {  // another job's secret
    int fd = dial(port);
    if (fd >= 0) {
      try {
        braid::comm::authenticate_connect(fd, "another-job-secret", 12s);
        fs.fail(at + "a handshake with another job's secret was accepted");
      } catch (const braid::Error&) {
      }
    }
    expect_dropped(fd, "another job's secret");
  }
  // Asked again after the slow attacks; the job may have ended by then
  // (make test runs this beside other tests), so only an answer counts.
  ask_store(false, 1);
}

// Opens n connections to port at once and holds them for a moment.
int flood(int port, int n) {
  std::vector<int> fds;
  for (int i = 0; i < n; ++i) {
    int fd = dial(port);
    if (fd < 0) break;
    fds.push_back(fd);
  }
  std::this_thread::sleep_for(500ms);
  for (int fd : fds) ::close(fd);
  return int(fds.size());
}

std::vector<nlohmann::json> losses(const std::string& path) {
  std::vector<nlohmann::json> out;
  for (auto& j : braid::testing::read_json_lines(path))
    if (j.contains("loss")) out.push_back(j["loss"]);
    else if (j.contains("final_loss")) out.push_back(j["final_loss"]);
  return out;
}

void expect_same_weights_bitwise(const std::string& a, const std::string& b, const std::string& what) {
  braid::Checkpoint x = braid::load_checkpoint(a), y = braid::load_checkpoint(b);
  size_t compared = 0;
  for (auto& [name, t] : x.tensors) {
    if (name.rfind("model/", 0) != 0) continue;
    auto it = y.tensors.find(name);
    ASSERT_NE(it, y.tensors.end()) << what << ": " << name;
    ASSERT_EQ(it->second.nbytes(), t.nbytes()) << what << ": " << name;
    EXPECT_EQ(std::memcmp(it->second.raw(), t.raw(), t.nbytes()), 0) << what << ": " << name << " differs";
    ++compared;
  }
  EXPECT_GT(compared, 0u) << what;
}

size_t lines_with(const std::string& path, const std::vector<std::string>& words) {
  std::ifstream f(path);
  std::string line;
  size_t n = 0;
  while (std::getline(f, line))
    for (auto& w : words)
      if (line.find(w) != std::string::npos) {
        ++n;
        break;
      }
  return n;
}

TEST(HostileTraffic, JobsFinishBitEqualWhileEveryPortIsAttacked) {
  const std::string dir = braid::testing::temp_dir("hostile");
  const std::string dp = braid_bin() + " run -n 4 -- " + braid_bin() + kDp;
  // Under braid run, so that the parameter-server job has its TCP store too.
  const std::string ps = braid_bin() + " run -n 4 -- " + braid_bin() + kPs;
  auto files = [&](const std::string& tag) {
    return " --json-log " + dir + "/" + tag + ".jsonl --checkpoint " + dir + "/" + tag + ".ckpt";
  };
  // Undisturbed (both at once, as the attacked pair runs).
  const pid_t rdp = spawn("BRAID_TRANSPORT=tcp " + dp + files("dp_ref"), dir + "/dp_ref.out");
  const pid_t rps = spawn(ps + files("ps_ref"), dir + "/ps_ref.out");
  for (pid_t p : {rdp, rps}) {
    int st = 0;
    ::waitpid(p, &st, 0);
    ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "an undisturbed run failed: see " << dir;
  }
  // Attacked.
  pid_t jdp = spawn("BRAID_TRANSPORT=tcp " + dp + files("dp"), dir + "/dp.out");
  pid_t jps = spawn(ps + files("ps"), dir + "/ps.out");
  Findings fs;
  std::set<int> seen;
  std::vector<std::thread> attackers;
  size_t max_fds = 0;
  std::string max_fds_who;  // that process's command line
  std::atomic<int> flooded{0};
  rlimit rl{};
  ::getrlimit(RLIMIT_NOFILE, &rl);
  const int flood_n = int(std::min<rlim_t>(1000, rl.rlim_cur > 200 ? rl.rlim_cur - 200 : 0));
  int st_dp = -1, st_ps = -1;
  const auto t0 = std::chrono::steady_clock::now();
  while ((st_dp < 0 || st_ps < 0) && std::chrono::steady_clock::now() - t0 < 300s) {
    std::set<pid_t> pids = family(jdp);
    for (pid_t p : family(jps)) pids.insert(p);
    for (pid_t p : pids) {
      const size_t n = fd_count(p);
      if (n > max_fds) {
        max_fds = n;
        std::ifstream f("/proc/" + std::to_string(p) + "/cmdline");
        std::string cmd((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
        for (char& c : cmd) c = c ? c : ' ';
        max_fds_who = cmd.substr(0, 200);
      }
    }
    for (const auto& found : listening_ports(pids)) {
      const int port = found.first;
      if (!seen.insert(port).second) continue;
      attackers.emplace_back([port, owner = found.second, &fs] { attack(port, owner, fs); });
      attackers.emplace_back([port, flood_n, &flooded] { flooded += flood(port, flood_n); });
    }
    int st;
    if (st_dp < 0 && ::waitpid(jdp, &st, WNOHANG) == jdp) st_dp = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
    if (st_ps < 0 && ::waitpid(jps, &st, WNOHANG) == jps) st_ps = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
    std::this_thread::sleep_for(20ms);
  }
  for (auto& t : attackers) t.join();
  ASSERT_EQ(st_dp, 0) << "see " << dir << "/dp.out";
  ASSERT_EQ(st_ps, 0) << "see " << dir << "/ps.out";
  EXPECT_GE(seen.size(), 3u) << "store, and the two parameter servers at least";
  EXPECT_GT(fs.attacks, 0);
  // Both jobs' stores are asked right after the fast attacks, before the
  // slow ones; a job may end before its slow attacks are over.
  EXPECT_GE(fs.stores_checked, 1) << "a job's store, still serving after the attacks on it; the ports asked:\n"
                                  << fs.not_stores;
  EXPECT_GE(fs.authed, 4) << "the stores and the parameter servers, past the handshake";
  EXPECT_GE(fs.store_length_drops, 1) << "a store seen dropping a huge length while its job ran";
  for (auto& f : fs.failures) ADD_FAILURE() << f;
  // Undisturbed results, bit for bit.
  EXPECT_EQ(losses(dir + "/dp.jsonl"), losses(dir + "/dp_ref.jsonl"));
  EXPECT_EQ(losses(dir + "/ps.jsonl"), losses(dir + "/ps_ref.jsonl"));
  expect_same_weights_bitwise(dir + "/dp_ref.ckpt", dir + "/dp.ckpt", "dp");
  expect_same_weights_bitwise(dir + "/ps_ref.ckpt", dir + "/ps.ckpt", "ps");
  // Descriptors bounded: the servers cap connections still proving the
  // secret, so a flood of 1,000 does not become 1,000 descriptors.
  EXPECT_LT(max_fds, 700u) << max_fds_who << " held that many descriptors during the flood";
  // Logs bounded: offenders are logged at a limited rate, not one line each.
  for (const char* j : {"dp", "ps"}) {
    const size_t n = lines_with(dir + "/" + j + ".out", {"dropped", "rejected"});
    EXPECT_GE(n, 1u) << j << ": the offenders were not logged";
    EXPECT_LT(n, 200u) << j << ": " << n << " log lines about dropped connections";
  }
  std::printf("ports attacked: %zu, attacks: %d, past the handshake: %d, stores: %d, flood connections: %d, "
              "max fds: %zu\n",
              seen.size(), fs.attacks, fs.authed, fs.stores_checked, flooded.load(), max_fds);
}

}  // namespace
