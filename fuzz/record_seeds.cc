// Records the seed corpora of the fuzz targets (fuzz/corpus/<target>/)
// from real traffic and real files: `fuzz_record_seeds <corpus dir>`.
//
// Wire targets: a real client talks to a real server (the TCP store; a
// parameter server with a worker on TCP) through a recording relay on
// 127.0.0.1, and each direction of each connection is saved after its
// job-secret handshake (the handshake's own bytes seed the auth target).
// File targets: the library's own writers (save_checkpoint, a shard's
// transfer_out, merge_probe,
// cluster_json of the presets, format_plan) write the files. Nothing here
// is typed in as bytes. (The TCP transport's target, tcp_frame, has no
// recorded seeds yet: its peers find each other through the store, which
// this relay does not rewrite.)
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "braid/checkpoint.h"
#include "braid/error.h"
#include "braid/plan_cluster.h"
#include "braid/ps_server.h"
#include "braid/ps_worker.h"
#include "braid/store.h"
#include "braid/tuning.h"
#include "comm/setup/probe.h"
#include "comm/store/memory_store.h"
#include "ps/io/socket.h"
#include "ps/shard/shard_state.h"
#include "ps_setup.h"

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

constexpr size_t kAuthBytes = 64;  // each side: a 32-byte nonce, a 32-byte MAC

// One relayed connection: what the client sent, what the server sent.
struct Flow {
  std::vector<uint8_t> up, down;
};

// Relays connections from its port to `port` on 127.0.0.1, recording them.
class Relay {
 public:
  explicit Relay(int to) : to_(to) {
    lfd_ = braid::ps::listen_tcp("127.0.0.1", &port_);
    thread_ = std::thread([this] { run(); });
  }
  ~Relay() {
    stop_ = true;
    thread_.join();
    ::close(lfd_);
  }
  int port() const { return port_; }
  std::vector<Flow> flows() {
    std::lock_guard<std::mutex> l(mu_);
    return flows_;
  }

 private:
  void run() {
    std::vector<std::thread> pipes;
    while (!stop_) {
      if (!braid::ps::wait_readable(lfd_, 50)) continue;
      int c = braid::ps::accept_tcp(lfd_);
      if (c < 0) continue;
      size_t idx;
      {
        std::lock_guard<std::mutex> l(mu_);
        idx = flows_.size();
        flows_.emplace_back();
      }
      pipes.emplace_back([this, c, idx] { pipe(c, idx); });
    }
    for (auto& t : pipes) t.join();
  }
  void pipe(int c, size_t idx) {
    int s = braid::ps::connect_tcp("127.0.0.1", to_, 10s, "relay");
    pollfd p[2] = {{c, POLLIN, 0}, {s, POLLIN, 0}};
    bool open[2] = {true, true};
    uint8_t buf[65536];
    while ((open[0] || open[1]) && !stop_) {
      p[0].fd = open[0] ? c : -1;
      p[1].fd = open[1] ? s : -1;
      if (::poll(p, 2, 50) <= 0) continue;
      for (int i = 0; i < 2; ++i) {
        if (!open[i] || !(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        ssize_t r = ::recv(p[i].fd, buf, sizeof buf, 0);
        int other = i == 0 ? s : c;
        if (r <= 0) {
          open[i] = false;
          ::shutdown(other, SHUT_WR);
          continue;
        }
        {
          std::lock_guard<std::mutex> l(mu_);
          auto& v = i == 0 ? flows_[idx].up : flows_[idx].down;
          v.insert(v.end(), buf, buf + r);
        }
        ::send(other, buf, size_t(r), MSG_NOSIGNAL);
      }
    }
    ::close(c);
    ::close(s);
  }

  int to_;
  int lfd_ = -1, port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::vector<Flow> flows_;
};

void save(const fs::path& dir, const std::string& name, const void* p, size_t n) {
  fs::create_directories(dir);
  std::ofstream f(dir / name, std::ios::binary);
  f.write(static_cast<const char*>(p), std::streamsize(n));
}
void save(const fs::path& dir, const std::string& name, const std::vector<uint8_t>& v) {
  save(dir, name, v.data(), v.size());
}
void save(const fs::path& dir, const std::string& name, const std::string& s) {
  save(dir, name, s.data(), s.size());
}

std::vector<uint8_t> after_auth(const std::vector<uint8_t>& v) {
  return v.size() <= kAuthBytes ? std::vector<uint8_t>() : std::vector<uint8_t>(v.begin() + kAuthBytes, v.end());
}

// The auth target's input: a role byte (0: braid accepts, 1: braid
// connects), then what the other side sent.
std::vector<uint8_t> auth_seed(uint8_t role, const std::vector<uint8_t>& from_peer) {
  std::vector<uint8_t> s{role};
  s.insert(s.end(), from_peer.begin(), from_peer.begin() + std::min(from_peer.size(), kAuthBytes));
  return s;
}

void record_store(const fs::path& out) {
  const std::string secret = "seed-secret";
  braid::TcpStoreServer server("127.0.0.1", 0, secret);
  Relay relay(server.port());
  {
    auto c = braid::connect_tcp_store("127.0.0.1", relay.port(), secret, 10s);
    c->set_str("rank/0", "127.0.0.1:4242");
    c->set("blob", braid::Bytes(100, 7));
    c->add("counter", 3);
    c->add("counter", -1);
    c->get_str("rank/0");
    c->compare_set("cas", {}, braid::Bytes{'a'});
    c->wait({"rank/0", "counter"}, 5s);
    c->check("blob");
    c->remove("blob");
    c->set_timeout(50ms);
    try {
      c->get("missing");
    } catch (const braid::Error&) {
    }
  }
  std::this_thread::sleep_for(200ms);
  auto flows = relay.flows();
  for (size_t i = 0; i < flows.size(); ++i) {
    save(out / "store_request", "client_" + std::to_string(i), after_auth(flows[i].up));
    save(out / "store_reply", "server_" + std::to_string(i), after_auth(flows[i].down));
    save(out / "auth", "accept_" + std::to_string(i), auth_seed(0, flows[i].up));
    save(out / "auth", "connect_" + std::to_string(i), auth_seed(1, flows[i].down));
  }
}

void record_ps(const fs::path& out) {
  const std::string secret = "seed-secret";
  auto store = braid::comm::make_memory_store();
  const braid::ps::Layout l = braid::fuzz::ps_layout();
  const braid::ps::ServerOptions o = braid::fuzz::ps_options(secret, 1);
  braid::ps::Server server(l, o, store, {std::vector<float>(8, 1.f), {}});
  Relay relay(server.port());
  store->set_str("ps/server/0", "127.0.0.1:" + std::to_string(relay.port()));
  {
    braid::ps::WorkerOptions wo;
    wo.secret = secret;
    wo.shm_bytes = 0;  // frames on TCP, where the relay sees them
    wo.timeout = 10s;
    braid::ps::Worker w(l, wo, store);
    std::vector<float> dense(8, 0.5f), got(8);
    std::vector<int64_t> rows = {3, 17};
    std::vector<float> rg(8, 0.25f), rv(8);
    w.push({{0, {}, dense.data()}, {1, rows, rg.data()}}, 0, true);
    w.pull({{0, {}, got.data()}, {1, rows, rv.data()}}, 1);
    w.report(0, 1.5, 4, 3);
    w.stats(0);
    w.finish();
  }
  std::this_thread::sleep_for(200ms);
  auto flows = relay.flows();
  for (size_t i = 0; i < flows.size(); ++i) save(out / "ps_frame", "worker_" + std::to_string(i), after_auth(flows[i].up));
}

void record_files(const fs::path& out) {
  {  // a checkpoint as save_checkpoint writes it, less its CRC and end marker
    braid::Checkpoint ck;
    ck.meta["step"] = "12";
    ck.meta["seed"] = "7";
    braid::Tensor a(braid::Shape{2, 3});
    braid::Tensor b(braid::Shape{4});
    ck.tensors["model/w"] = a;
    ck.tensors["optim/w/m"] = b;
    const fs::path tmp = fs::temp_directory_path() / "braid_seed.ckpt";
    braid::save_checkpoint(tmp.string(), ck);
    std::ifstream f(tmp, std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    fs::remove(tmp);
    bytes.resize(bytes.size() - 12);
    save(out / "checkpoint", "two_tensors", bytes);
  }
  {  // a shard's state as a tail sends it to a joining server (transfer_out)
    braid::ps::ShardState st(braid::fuzz::ps_layout(), braid::fuzz::ps_options("unused", 2),
                             {std::vector<float>(8, 1.f), {}}, {});
    const fs::path tmp = fs::temp_directory_path() / "braid_seed_shard.ckpt";
    st.transfer_out(tmp.string());
    std::ifstream f(tmp, std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    fs::remove(tmp);
    bytes.resize(bytes.size() - 12);
    save(out / "shard_state", "fresh_shard", bytes);
  }
  for (const std::string& name : braid::plan::preset_names())
    save(out / "cluster", name + ".json", braid::plan::cluster_json(braid::plan::cluster_preset(name)));
  std::string tuning;
  for (const char* kind : {"shm", "tcp", "net"})
    tuning = braid::comm::merge_probe(tuning, kind, braid::comm::reference_probe(kind), "seed-host");
  save(out / "tuning", "tuning.json", tuning);
  save(out / "tuning", "plan", braid::comm::format_plan({{"shm", 1}, {"tcp", 2}}));
  std::vector<std::vector<double>> bw(6, std::vector<double>(6, 10.0));
  for (int i = 0; i < 6; ++i) bw[size_t(i)][size_t(i)] = 0, bw[size_t(i)][size_t((i + 3) % 6)] = 100.0;
  save(out / "tuning", "topology.json", nlohmann::json(bw).dump());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus dir>\n", argv[0]);
    return 2;
  }
  const fs::path out = argv[1];
  record_store(out);
  record_ps(out);
  record_files(out);
  std::printf("seeds written under %s\n", out.c_str());
  return 0;
}
