// across_hosts: all_reduce between namespaced test hosts (the hosts of
// tests/support/test_hosts.h: own network, host name, IPC and /dev/shm,
// joined by a bridge over veth pairs), braid beside Open MPI over the same
// wire, in one run.
//
//   build/across_hosts [ROUNDS] [CONFIGS...]      e.g. 3 2x1 2x2 3x2
//   build/across_hosts ROUNDS dp                  the training part only
//   build/across_hosts ROUNDS wire                the TCP streams only
//   ALL=1 build/across_hosts ...                  also every algorithm's medians
//   ALGOS="hier mpi" build/across_hosts ...       auto and only those beside it
//   BUSY=1 build/across_hosts ...                 how busy each core was, per run
//   BYTES=16M ITERS=100 build/across_hosts ...    one size, more iterations
//   EPOCHS=4 build/across_hosts ROUNDS dp         longer training runs
//   CONNS=4 build/across_hosts ROUNDS wire        also the two-way streams over 4 connections
//
// For each HOSTSxRANKS configuration and round (the order of the runs
// reversed every other round), 4 KiB to 64 MiB (x4):
//   * first, `braid bench --probe` across two hosts, so that every braid
//     run prices the link between hosts ("net") as a user's first job
//     across hosts leaves it;
//   * braid bench under one `braid run --nnodes H` launcher per host, with
//     the selector's own choice ("auto") and with each algorithm forced
//     (BRAID_ALGO=all_reduce:X: ring, hd, rd, direct, hier where it
//     applies);
//   * bench/mpi_bench.c under mpirun across the same hosts (a launch agent
//     enters the other hosts' namespaces in place of ssh; --mca btl
//     tcp,self,vader on eth0; yielding when idle where a core has more
//     than one rank), built with
//     mpicc into BUILD/bench-mpi;
//   * one TCP stream node0 -> node1 and two at once, one each way (C++
//     sockets, 1 GiB each), with how busy each host's core was: the
//     wire's own figures;
//   * `braid train mlp` data parallel at 2 hosts x 1 rank, one epoch: its
//     samples/s and exposed communication (the done record's), beside the
//     same job on this machine (--dp 2, shared memory, both cores).
// Prints, per configuration and size, the medians of busbw (GB/s): auto,
// the best forced algorithm and auto / best, Open MPI and braid / MPI; then
// the stream. Needs root (namespaces), mpicc and mpirun (scripts/deps.sh
// bench). Measure on a quiet machine.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/multiproc.h"
#include "support/test_hosts.h"
#include "support/tool.h"

using braid::testing::TestHosts;

namespace {

constexpr int kPort = 29700;
const std::vector<std::string> kForced = {"ring", "hd", "rd", "direct", "hier"};

struct Config {
  int hosts = 2, per_host = 1;
  std::string name() const { return std::to_string(hosts) + "x" + std::to_string(per_host); }
};

// bytes -> busbw of one run (empty when the run failed or was refused).
using Row = std::map<int64_t, double>;
// bytes -> the algorithm braid's rows name (what auto picked).
std::map<int64_t, std::string> g_picked;
// The tuning file every braid run reads: this machine's cache with the
// link between the hosts probed ("net"), as a first job across hosts
// leaves it.
std::string g_tuning;
// Each host pinned to one core (main): a host's ranks then share it.
bool g_pinned = false;

// `braid bench --probe` across two hosts (one rank each) into a copy of
// this machine's tuning cache; prints what it measured. A probe refused
// because the ranks shared their cores is tried again (five times).
void probe_between_hosts(const TestHosts& hosts, const std::string& dir) {
  g_tuning = dir + "/tuning.json";
  const std::string cache = braid::testing::run_command(
      braid::testing::braid_bin() + " doctor --no-all-reduce --json").out;
  std::string from;
  try {
    from = nlohmann::json::parse(cache)["checks"]["tuning"]["data"]["path"].get<std::string>();
  } catch (const std::exception&) {
  }
  for (int attempt = 0; attempt < 5; ++attempt) {
    braid::testing::run_command("cp " + from + " " + g_tuning + " 2>/dev/null || true");
    std::vector<braid::testing::HostJob> jobs;
    for (int r = 0; r < 2; ++r)
      jobs.push_back(hosts.start(
          r,
          "export BRAID_SECRET=across-hosts BRAID_PROBE=0 BRAID_TIMEOUT=120; exec " +
              braid::testing::braid_bin() + " run -n 1 --nnodes 2 --node-rank " +
              std::to_string(r) + " --master " + hosts.address(0) + ":" + std::to_string(kPort) +
              " -- " + braid::testing::braid_bin() + " bench --probe --probe-out " + g_tuning,
          dir + "/probe" + std::to_string(r) + ".out"));
    int status = 0;
    for (auto& j : jobs) status |= j.wait(std::chrono::steady_clock::now() + std::chrono::seconds(120));
    const std::string out = jobs[0].output();
    const size_t at = out.find("probe net:");
    if (status == 0 && at != std::string::npos) {
      std::printf("# the link between hosts, as braid bench --probe measured it:\n# %s\n\n",
                  out.substr(at, out.find('\n', out.find("model net:", at)) - at).c_str());
      return;
    }
  }
  std::printf("# the link between hosts could not be probed (other work shared the cores): "
              "its figures are the loopback TCP ones\n\n");
}

// BYTES=16M: that size alone (4 KiB to 64 MiB otherwise); ITERS: timed
// iterations a size (10).
std::string min_bytes() { return std::getenv("BYTES") ? std::getenv("BYTES") : "4K"; }
std::string max_bytes() { return std::getenv("BYTES") ? std::getenv("BYTES") : "64M"; }
std::string iters() { return std::getenv("ITERS") ? std::getenv("ITERS") : "10"; }

Row parse_rows(const std::string& out, bool record_algo = false) {
  Row r;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    const size_t brace = line.find('{');
    if (brace == std::string::npos) continue;
    try {
      auto j = nlohmann::json::parse(line.substr(brace));
      if (j.contains("bytes") && j.contains("busbw_gbs") && j.value("wrong", 0) == 0)
        r[j["bytes"].get<int64_t>()] = j["busbw_gbs"].get<double>();
      if (record_algo && j.contains("algo"))
        g_picked[j["bytes"].get<int64_t>()] = j["algo"].get<std::string>();
    } catch (const std::exception&) {
    }
  }
  return r;
}

// braid bench across the hosts, `algo` forced unless "auto".
Row run_braid(const TestHosts& hosts, const Config& c, const std::string& algo,
              const std::string& dir) {
  const std::string bench = braid::testing::braid_bin() + " bench --op all_reduce -b " + min_bytes() +
                            " -e " + max_bytes() + " -f 4 --iters " + iters() + " --warmup 3 --json";
  std::vector<braid::testing::HostJob> jobs;
  for (int r = 0; r < c.hosts; ++r) {
    std::string cmd = "export BRAID_SECRET=across-hosts BRAID_PROBE=0 BRAID_TIMEOUT=120 "
                      "BRAID_TUNING=" + g_tuning;
    if (algo != "auto") cmd += " BRAID_ALGO=all_reduce:" + algo;
    cmd += "; exec " + braid::testing::braid_bin() + " run -n " + std::to_string(c.per_host) +
           " --nnodes " + std::to_string(c.hosts) + " --node-rank " + std::to_string(r) +
           " --master " + hosts.address(0) + ":" + std::to_string(kPort) + " -- " + bench;
    jobs.push_back(hosts.start(r, cmd, dir + "/braid" + std::to_string(r) + ".out"));
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
  int status = 0;
  for (auto& j : jobs) status |= j.wait(deadline);
  if (status != 0) return {};
  return parse_rows(jobs[0].output(), algo == "auto");
}

Row run_mpi(const TestHosts& hosts, const Config& c, const std::string& mpi_bench,
            const std::string& dir) {
  // The test hosts share this machine's cores: where their ranks outnumber
  // them Open MPI must yield when idle, as --oversubscribe makes it on one
  // host (RIVALS.md: busy-polling is thousands of times slower there).
  const bool shared = c.hosts * c.per_host > int(::sysconf(_SC_NPROCESSORS_ONLN)) ||
                      (g_pinned && c.per_host > 1);
  const std::string yield = shared ? "--mca mpi_yield_when_idle 1 " : "";
  std::string list;
  for (int i = 0; i < c.hosts; ++i)
    list += (i ? "," : "") + hosts.name(i) + ":" + std::to_string(c.per_host);
  const std::string cmd =
      "timeout 300 mpirun --allow-run-as-root --oversubscribe --bind-to none -H " + list +
      " -np " + std::to_string(c.hosts * c.per_host) + " --mca plm_rsh_agent " + dir +
      "/agent --mca btl tcp,self,vader --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include "
      "eth0 " + yield + mpi_bench + " --op all_reduce --min-bytes " + min_bytes() +
      " --max-bytes " + max_bytes() + " --iters " + iters() + " --warmup 3";
  std::string out;
  if (hosts.run(0, cmd, &out) != 0) {
    std::fprintf(stderr, "mpirun failed:\n%s\n", out.c_str());
    return {};
  }
  return parse_rows(out);
}

// TCP streams between the test hosts (`across_hosts --stream both|recv|
// send ...`, run inside a host): 4 MiB send() and recv() calls on a
// blocking socket with the kernel's own buffer tuning, so that the figure
// is the kernel's TCP over veth and little else (python's, used before,
// was slower). `both PEER PORT` receives on one thread and sends on
// another; `recv PORT` only receives; `send HOST PORT` only sends. Each
// sends 1 GiB and the receiver prints its GB/s from its first byte.
constexpr size_t kStreamChunk = size_t(4) << 20;
constexpr size_t kStreamBytes = size_t(1) << 30;

int stream_listen(int port) {
  int l = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  ::setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  if (::bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(l, 1) != 0) return -1;
  return l;
}

double stream_recv(int l) {
  int c = ::accept(l, nullptr, nullptr);
  if (c < 0) return 0;
  std::vector<char> buf(kStreamChunk);
  size_t n = 0;
  std::chrono::steady_clock::time_point t0;
  for (;;) {
    ssize_t k = ::recv(c, buf.data(), buf.size(), 0);
    if (k <= 0) break;
    if (n == 0) t0 = std::chrono::steady_clock::now();
    n += size_t(k);
  }
  ::close(c);
  return double(n) / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 1e9;
}

bool stream_send(const std::string& host, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  ::inet_pton(AF_INET, host.c_str(), &a.sin_addr);
  int s = -1;
  for (int i = 0; i < 200 && s < 0; ++i) {  // the receiver may still be starting
    s = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(s);
      s = -1;
      ::usleep(50000);
    }
  }
  if (s < 0) return false;
  std::vector<char> buf(kStreamChunk, 1);
  for (size_t sent = 0; sent < kStreamBytes;) {
    ssize_t k = ::send(s, buf.data(), std::min(buf.size(), kStreamBytes - sent), MSG_NOSIGNAL);
    if (k <= 0) return false;
    sent += size_t(k);
  }
  ::close(s);
  return true;
}

int stream_main(int argc, char** argv) {
  const std::string mode = argc > 2 ? argv[2] : "";
  if (mode == "send" && argc == 5) return stream_send(argv[3], std::atoi(argv[4])) ? 0 : 1;
  if (mode == "recv" && argc == 4) {
    int l = stream_listen(std::atoi(argv[3]));
    std::printf("%.4f\n", l < 0 ? 0.0 : stream_recv(l));
    return 0;
  }
  if (mode == "both" && argc == 5) {
    int l = stream_listen(std::atoi(argv[4]));
    if (l < 0) return 1;
    double got = 0;
    std::thread rx([&] { got = stream_recv(l); });
    const bool ok = stream_send(argv[3], std::atoi(argv[4]));
    rx.join();
    std::printf("%.4f\n", got);
    return ok ? 0 : 1;
  }
  std::fprintf(stderr, "across_hosts --stream both PEER PORT | recv PORT | send HOST PORT\n");
  return 2;
}

// Busy and total jiffies of each CPU (/proc/stat; busy is all but idle and
// iowait, so it counts the softirq time where the kernel moves packets).
std::vector<std::pair<double, double>> cpu_jiffies();

// How busy each CPU was since construction: shares() in [0, 1] by CPU;
// text() as " 95% 95%".
class BusyMeter {
 public:
  BusyMeter() : before_(cpu_jiffies()) {}
  std::vector<double> shares() const {
    const auto after = cpu_jiffies();
    std::vector<double> v;
    for (size_t i = 0; i < after.size() && i < before_.size(); ++i)
      v.push_back((after[i].first - before_[i].first) /
                  std::max(1.0, after[i].second - before_[i].second));
    return v;
  }
  std::string text() const {
    std::string t;
    for (double x : shares()) t += " " + std::to_string(int(100 * x + 0.5)) + "%";
    return t;
  }

 private:
  std::vector<std::pair<double, double>> before_;
};

std::vector<std::pair<double, double>> cpu_jiffies() {
  std::vector<std::pair<double, double>> v;
  std::ifstream in("/proc/stat");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("cpu", 0) != 0 || line.size() < 4 || !std::isdigit(static_cast<unsigned char>(line[3])))
      continue;
    std::istringstream f(line.substr(line.find(' ')));
    double x, total = 0, idle = 0;
    for (int i = 0; f >> x; ++i) {
      if (i < 8) total += x;  // user nice system idle iowait irq softirq steal
      if (i == 3 || i == 4) idle += x;
    }
    v.push_back({total - idle, total});
  }
  return v;
}

// The GB/s a stream job printed, 0 when it printed none.
double rate_of(const braid::testing::HostJob& job) {
  try {
    return std::stod(job.output());
  } catch (const std::exception&) {
    return 0;
  }
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

std::string human(int64_t b) {
  if (b >= (1 << 20)) return std::to_string(b >> 20) + " MiB";
  return std::to_string(b >> 10) + " KiB";
}

// One stream run: GB/s (the receiver's; both ways: the slower) and the
// busy fraction of hosts 0's and 1's cores over the run.
struct StreamRun {
  double gbps = 0, busy0 = 0, busy1 = 0;
};

// `both`: node0 <-> node1 at once (a 2-rank all_reduce's traffic, each
// host's one core sending and receiving); else node0 -> node1.
// `conns` > 1: that many connections each way at once, each its own
// process (ports 29801 + i), their rates added.
StreamRun tcp_stream(const TestHosts& hosts, const std::string& dir, bool both, int conns = 1) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const int cpu0 = 0, cpu1 = 1 % int(::sysconf(_SC_NPROCESSORS_ONLN));
  const BusyMeter meter;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<braid::testing::HostJob> jobs;
  if (both) {
    for (int i = 0; i < conns; ++i)
      for (int h = 0; h < 2; ++h)
        jobs.push_back(hosts.start(h,
                                   "exec " + self + " --stream both " + hosts.address(1 - h) + " " +
                                       std::to_string(29801 + i),
                                   dir + "/both" + std::to_string(h) + "_" + std::to_string(i) + ".out"));
  } else {
    jobs.push_back(hosts.start(1, "exec " + self + " --stream recv 29800", dir + "/recv.out"));
    jobs.push_back(hosts.start(0, "exec " + self + " --stream send " + hosts.address(1) + " 29800",
                               dir + "/send.out"));
  }
  const auto deadline = t0 + std::chrono::seconds(60);
  for (auto& j : jobs) j.wait(deadline);
  const std::vector<double> busy = meter.shares();
  StreamRun r;
  if (both) {
    double into[2] = {0, 0};  // what each host received, over its connections
    for (size_t j = 0; j < jobs.size(); ++j) into[j % 2] += rate_of(jobs[j]);
    r.gbps = std::min(into[0], into[1]);
  } else {
    r.gbps = rate_of(jobs[0]);
  }
  r.busy0 = size_t(cpu0) < busy.size() ? busy[size_t(cpu0)] : 0;
  r.busy1 = size_t(cpu1) < busy.size() ? busy[size_t(cpu1)] : 0;
  return r;
}

// Medians over ROUNDS of each kind of stream, printed with the cores'
// busy fractions: where both are near 1 the kernel's TCP over veth is
// bound by the cores, and the GB/s is what a core can send and receive.
void print_streams(const TestHosts& hosts, const std::string& dir, int rounds) {
  // CONNS=2: the two-way streams over that many connections each way too.
  const int conns = std::getenv("CONNS") ? std::max(1, std::atoi(std::getenv("CONNS"))) : 1;
  for (int kind = 0; kind < (conns > 1 ? 3 : 2); ++kind) {
    const bool both = kind > 0;
    const int k = kind == 2 ? conns : 1;
    std::vector<double> gbps, b0, b1;
    for (int r = 0; r < rounds; ++r) {
      const StreamRun s = tcp_stream(hosts, dir, both, k);
      gbps.push_back(s.gbps);
      b0.push_back(s.busy0);
      b1.push_back(s.busy1);
    }
    std::printf("%s (1 GiB, C++ sockets, 4 MiB calls): %.3f GB/s%s (median of %d; %.3f-%.3f); "
                "busy: host 0's core %.0f%%, host 1's core %.0f%%\n",
                !both  ? "one TCP stream node0 -> node1"
                : k == 1 ? "two TCP streams at once, one each way"
                         : ("TCP streams at once over " + std::to_string(k) + " connections each way").c_str(),
                median(gbps), both ? " each way, the slower" : "", rounds,
                *std::min_element(gbps.begin(), gbps.end()), *std::max_element(gbps.begin(), gbps.end()),
                100 * median(b0), 100 * median(b1));
  }
}


}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--stream") return stream_main(argc, argv);
  int rounds = argc > 1 ? std::atoi(argv[1]) : 3;
  std::vector<Config> configs;
  for (int i = 2; i < argc; ++i) {
    Config c;
    if (std::sscanf(argv[i], "%dx%d", &c.hosts, &c.per_host) == 2) configs.push_back(c);
  }
  // "dp" alone: only the data-parallel training part (on 2 hosts).
  const bool only_dp = argc == 3 && std::string(argv[2]) == "dp";
  // "wire" alone: only the TCP streams between two hosts.
  const bool only_wire = argc == 3 && std::string(argv[2]) == "wire";
  if (configs.empty()) configs = {{2, 1}, {2, 2}, {3, 2}};
  if (only_dp || only_wire) configs = {{2, 1}};
  int most = 0;
  for (const Config& c : configs) most = std::max(most, c.hosts);

  const std::string dir = braid::testing::temp_dir("across_hosts");
  const std::string bin = braid::testing::braid_bin();
  const std::string build = bin.substr(0, bin.rfind('/'));
  const std::string mpi_bench = build + "/bench-mpi/mpi_bench";
  ::mkdir((build + "/bench-mpi").c_str(), 0755);
  const std::string src = std::string(BRAID_SOURCE_DIR) + "/bench/mpi_bench.c";
  if (braid::testing::run_command("mpicc -O2 " + src + " -o " + mpi_bench).status != 0) {
    std::fprintf(stderr, "across_hosts: mpicc failed (scripts/deps.sh bench installs it)\n");
    return 1;
  }
  std::string why;
  auto hosts = TestHosts::make(most, &why);
  if (!hosts) {
    std::fprintf(stderr, "across_hosts: no test hosts: %s\n", why.c_str());
    return 1;
  }
  hosts->name_hosts(dir);
  // Each host on a core of its own (host i on CPU i mod the machine's
  // cores), as separate machines would be, instead of every host's ranks
  // contending for every core: where two hosts' ranks shared a core, the
  // same run of one algorithm measured 1 or 2.5 GB/s by where the
  // scheduler put them. PIN=0 leaves them unpinned.
  const int ncpu = int(::sysconf(_SC_NPROCESSORS_ONLN));
  const bool pin = std::getenv("PIN") == nullptr || std::string(std::getenv("PIN")) != "0";
  g_pinned = pin;
  if (pin)
    for (int i = 0; i < hosts->size(); ++i) hosts->set_cpus(i, std::to_string(i % ncpu));
  hosts->write_launch_agent(dir);

  std::printf("# all_reduce across %d namespaced hosts (veth + bridge), busbw GB/s, medians of %d "
              "rounds; %s\n\n", most, rounds,
              pin ? "host i pinned to CPU i mod the machine's cores" : "hosts unpinned");
  if (only_wire) {
    print_streams(*hosts, dir, rounds);
    return 0;
  }
  probe_between_hosts(*hosts, dir);
  for (const Config& c : configs) {
    if (only_dp) break;
    // Each run's name -> per-size busbw samples.
    std::map<std::string, std::map<int64_t, std::vector<double>>> got;
    g_picked.clear();
    std::vector<std::string> runs = {"auto"};
    for (const std::string& a : kForced)
      if (a != "hier" || c.per_host > 1) runs.push_back(a);
    runs.push_back("mpi");
    if (const char* only = std::getenv("ALGOS")) {  // e.g. ALGOS="hier mpi": auto and those
      const std::string keep = std::string(" ") + only + " ";
      std::erase_if(runs, [&](const std::string& a) {
        return a != "auto" && keep.find(" " + a + " ") == std::string::npos;
      });
    }
    for (int r = 0; r < rounds; ++r) {
      std::vector<std::string> order = runs;
      if (r % 2) std::reverse(order.begin(), order.end());
      for (const std::string& run : order) {
        const BusyMeter meter;
        const Row row = run == "mpi" ? run_mpi(*hosts, c, mpi_bench, dir)
                                     : run_braid(*hosts, c, run, dir);
        if (std::getenv("BUSY") != nullptr)  // BUSY=1: how busy each core was over the run
          std::fprintf(stderr, "%s %s round %d: cores busy%s\n", c.name().c_str(), run.c_str(),
                       r + 1, meter.text().c_str());
        for (const auto& [bytes, bw] : row) got[run][bytes].push_back(bw);
      }
    }
    std::printf("## %s (%d hosts x %d ranks)\n\n", c.name().c_str(), c.hosts, c.per_host);
    std::printf("| bytes | auto (its pick) | best forced | auto / best | Open MPI | auto / MPI |\n");
    std::printf("|---|---|---|---|---|---|\n");
    for (const auto& [bytes, samples] : got["auto"]) {
      const double a = median(samples);
      std::string best_name = "-";
      double best = 0;
      for (const std::string& f : kForced) {
        auto it = got[f].find(bytes);
        if (it == got[f].end()) continue;
        const double m = median(it->second);
        if (m > best) best = m, best_name = f;
      }
      const double mpi = got["mpi"].count(bytes) ? median(got["mpi"][bytes]) : 0;
      std::printf("| %s | %.3f (%s) | %.3f (%s) | %.2f | %.3f | %.2f |\n", human(bytes).c_str(), a,
                  g_picked[bytes].c_str(),
                  best, best_name.c_str(), best > 0 ? a / best : 0, mpi, mpi > 0 ? a / mpi : 0);
    }
    std::printf("\n");
    if (std::getenv("ALL") != nullptr) {  // ALL=1: every algorithm's median busbw
      std::printf("| bytes |");
      for (const std::string& f : runs) std::printf(" %s |", f.c_str());
      std::printf("\n|---|");
      for (size_t i = 0; i < runs.size(); ++i) std::printf("---|");
      std::printf("\n");
      for (const auto& [bytes, samples] : got["auto"]) {
        std::printf("| %s |", human(bytes).c_str());
        for (const std::string& f : runs)
          std::printf(got[f].count(bytes) ? " %.3f |" : " - |",
                      got[f].count(bytes) ? median(got[f][bytes]) : 0.0);
        std::printf("\n");
      }
      std::printf("\n");
    }
    std::fflush(stdout);
  }
  // Data-parallel training, 2 hosts x 1 rank against one host's 2 ranks.
  // TRAIN_FLAGS: more flags for every run (e.g. --bucket-reduce background);
  // TRAIN_FLAGS_B: a second variant across hosts, run alternately with the
  // first (in "dp" mode), for an A/B under the same conditions.
  const char* more = std::getenv("TRAIN_FLAGS");
  const char* more_b = std::getenv("TRAIN_FLAGS_B");
  // EPOCHS: more than one, so that start-up is a small part of BUSY's figure.
  std::string train = braid::testing::braid_bin() + " train mlp --epochs " +
                      (std::getenv("EPOCHS") ? std::getenv("EPOCHS") : "1") + " --quiet";
  if (more) train.append(" ").append(more);
  // samples/s and the worse rank's exposed communication of a run's done record.
  auto done = [](const std::string& path, std::vector<double>& sps, std::vector<double>& exp) {
    std::ifstream in(path);
    std::string line, last;
    while (std::getline(in, line))
      if (!line.empty()) last = line;
    try {
      auto j = nlohmann::json::parse(last);
      sps.push_back(j["samples_per_s"].get<double>());
      double worst = 0;
      for (const auto& f : j["exposed_comm_fraction"]) worst = std::max(worst, f.get<double>());
      exp.push_back(worst);
    } catch (const std::exception&) {
    }
  };
  auto across = [&](const std::string& cmd, std::vector<double>& sps, std::vector<double>& exp) {
    std::vector<braid::testing::HostJob> jobs;
    for (int h = 0; h < 2; ++h)
      jobs.push_back(hosts->start(
          h,
          "export BRAID_SECRET=across-hosts BRAID_PROBE=0 BRAID_TIMEOUT=120 BRAID_TUNING=" +
              g_tuning + "; exec " + braid::testing::braid_bin() + " run -n 1 --nnodes 2 --node-rank " +
              std::to_string(h) + " --master " + hosts->address(0) + ":" + std::to_string(kPort) +
              " -- " + cmd + " --json-log " + dir + "/dp_across.jsonl",
          dir + "/train" + std::to_string(h) + ".out"));
    const BusyMeter meter;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
    int status = 0;
    for (auto& j : jobs) status |= j.wait(deadline);
    if (status == 0) done(dir + "/dp_across.jsonl", sps, exp);
    ::unlink((dir + "/dp_across.jsonl").c_str());
    if (std::getenv("BUSY") != nullptr)  // how busy each host's core was over the run
      std::fprintf(stderr, "train across 2 hosts: cores busy%s\n", meter.text().c_str());
  };
  std::vector<double> across_sps, across_exposed, b_sps, b_exposed, local_sps, local_exposed;
  const bool ab = only_dp && more_b != nullptr;
  for (int r = 0; r < rounds; ++r) {
    across(train, across_sps, across_exposed);
    if (ab) {
      across(train + " " + more_b, b_sps, b_exposed);
      continue;
    }
    // On this machine itself, not on a test host: a pinned host has one core.
    const int local = braid::testing::run_command(train + " --dp 2 --json-log " + dir +
                                                  "/dp_local.jsonl").status;
    if (local == 0) done(dir + "/dp_local.jsonl", local_sps, local_exposed);
    ::unlink((dir + "/dp_local.jsonl").c_str());
  }
  if (ab)
    std::printf(
        "%s, data parallel, 2 hosts x 1 rank: %.0f samples/s, exposed "
        "communication %.1f%%; with %s: %.0f samples/s, %.1f%% (medians of %d)\n",
        train.substr(train.find("train mlp")).c_str(), median(across_sps),
        100 * median(across_exposed), more_b, median(b_sps), 100 * median(b_exposed), rounds);
  else
    std::printf(
        "%s, data parallel: 2 hosts x 1 rank %.0f samples/s, exposed "
        "communication %.1f%% (the worse rank); one host, 2 ranks: %.0f samples/s, %.1f%% "
        "(medians of %d)\n",
        train.substr(train.find("train mlp")).c_str(), median(across_sps),
        100 * median(across_exposed), median(local_sps), 100 * median(local_exposed), rounds);
  print_streams(*hosts, dir, rounds);
  return 0;
}
