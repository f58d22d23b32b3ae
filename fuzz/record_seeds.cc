// Records the seed corpora of the fuzz targets (fuzz/corpus/<target>/)
// from real traffic and real files: `fuzz_record_seeds <corpus dir>`.
//
// Wire targets: a real client talks to a real server (the TCP store; a
// parameter server with a worker on TCP) through a recording relay on
// 127.0.0.1, and each direction of each connection is saved after its
// job-secret handshake (the handshake's own bytes seed the auth target).
// The TCP transport's pair finds each other through the store, so its
// relay sits behind a store that publishes the relay's port in place of
// the listener's.
// The shared-memory ring (shm_ring): a real ShmWire sends to a rank this
// program plays (fuzz/shm_setup.h), and what it wrote into that rank's
// ring is saved.
// The dataset target: the installed Fashion-MNIST, cut to two images.
// File targets: the library's own writers (save_checkpoint, a shard's
// transfer_out, merge_probe,
// cluster_json of the presets, format_plan) write the files. Nothing here
// is typed in as bytes.
#include <netinet/in.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <zlib.h>

#include "braid/checkpoint.h"
#include "braid/data.h"
#include "braid/error.h"
#include "braid/plan_cluster.h"
#include "braid/plan_model.h"
#include "braid/ps_server.h"
#include "braid/ps_worker.h"
#include "braid/store.h"
#include "braid/tuning.h"
#include "comm/setup/probe.h"
#include "comm/store/memory_store.h"
#include "ps/io/socket.h"
#include "ps/io/wire.h"
#include "ps/shard/shard_state.h"
#include "comm/transport/shm/shm_transport.h"
#include "comm/transport/tcp/tcp_connect.h"
#include "comm/transport/tcp/tcp_transport.h"
#include "nn/gunzip.h"
#include "ps_setup.h"
#include "shm_setup.h"
#include "tcp_setup.h"

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

// Each side of the job-secret handshake (comm/store/auth.cc): a u32 magic
// and a 32-byte nonce, then a 32-byte MAC.
constexpr size_t kAuthBytes = 4 + 32 + 32;

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
    braid::fuzz::ps_worker_session(w);
  }
  std::this_thread::sleep_for(200ms);
  auto flows = relay.flows();
  for (size_t i = 0; i < flows.size(); ++i) {
    const std::vector<uint8_t> frames = after_auth(flows[i].up);
    save(out / "ps_frame", "worker_" + std::to_string(i), frames);
    // ps_reply: the server's side, hello reply first.
    save(out / "ps_reply", "server_" + std::to_string(i), after_auth(flows[i].down));
    // ps_shm: what follows the hello (a header without payload), which
    // goes over TCP before the rings are taken up.
    if (frames.size() > sizeof(braid::ps::wire::Header))
      save(out / "ps_shm", "worker_" + std::to_string(i),
           std::vector<uint8_t>(frames.begin() + sizeof(braid::ps::wire::Header), frames.end()));
  }
}

// A store whose TCP transport addresses ("tcp/addr/<rank>": host, port,
// streams) point at a recording relay to the real listener.
class RelayingStore : public braid::Store {
 public:
  explicit RelayingStore(std::shared_ptr<braid::Store> s) : s_(std::move(s)) {}
  void set(const std::string& key, const braid::Bytes& value) override {
    if (key.rfind("tcp/addr/", 0) != 0) return s_->set(key, value);
    std::string v(value.begin(), value.end());
    const size_t a = v.find(' '), b = v.find(' ', a + 1);
    std::lock_guard<std::mutex> l(mu_);
    relays_.push_back(std::make_unique<Relay>(std::atoi(v.c_str() + a + 1)));
    v = v.substr(0, a) + " " + std::to_string(relays_.back()->port()) + v.substr(b);
    s_->set(key, braid::Bytes(v.begin(), v.end()));
  }
  braid::Bytes get(const std::string& key) override { return s_->get(key); }
  int64_t add(const std::string& key, int64_t d) override { return s_->add(key, d); }
  braid::Bytes compare_set(const std::string& key, const braid::Bytes& e, const braid::Bytes& d) override {
    return s_->compare_set(key, e, d);
  }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds t) override { s_->wait(keys, t); }
  bool remove(const std::string& key) override { return s_->remove(key); }
  bool check(const std::string& key) override { return s_->check(key); }
  std::vector<Flow> flows() {
    std::vector<Flow> out;
    std::lock_guard<std::mutex> l(mu_);
    for (auto& r : relays_)
      for (auto& f : r->flows()) out.push_back(f);
    return out;
  }

 private:
  std::shared_ptr<braid::Store> s_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Relay>> relays_;
};

// Rank 1 of a real TCP pair sends to rank 0: its connection's bytes after
// the handshake (its hello, then each message's header and payload) with
// the payloads cut out, as the tcp_frame target reads them. Messages: the
// one rank 0 expects (tcp_setup.h), then one of another sequence number
// and one of another count.
void record_tcp(const fs::path& out) {
  using namespace braid::comm;
  ::setenv("BRAID_TCP_STREAMS", std::to_string(braid::fuzz::kTcpStreams).c_str(), 1);
  ::setenv("BRAID_TCP_ADDR", "127.0.0.1", 1);  // where the relay listens and connects
  RelayingStore store(braid::comm::make_memory_store());
  TransportOptions opt;
  opt.mode = "tcp";
  opt.secret = "seed-secret";
  std::vector<MsgSig> sigs(3, braid::fuzz::tcp_sig());
  sigs[1].seq += 1;
  sigs[2].count /= 2;
  sigs[2].bytes /= 2;
  auto run = [&](int rank) {
    WireContext ctx;
    ctx.rank = rank;
    ctx.size = braid::fuzz::kTcpWorld;
    ctx.store = &store;
    ctx.opt = &opt;
    ctx.token = braid::fuzz::kTcpToken;
    ctx.deadline_ns = braid::now_ns() + 10'000'000'000ull;
    for (int r = 0; r < 2; ++r) {
      PeerInfo p;
      p.rank = r;
      p.pid = ::getpid();
      p.host = p.host_id = "seed-host-" + std::to_string(r);  // apart: TCP between them
      ctx.peers.push_back(p);
    }
    std::unique_ptr<Wire> w = make_tcp_wire(ctx, {1 - rank});
    std::vector<std::vector<uint8_t>> bufs;
    std::vector<Request> reqs(sigs.size());
    for (size_t i = 0; i < sigs.size(); ++i) {
      bufs.emplace_back(sigs[i].bytes, uint8_t(i + 1));
      reqs[i].kind = rank == 1 ? Request::Kind::kSend : Request::Kind::kRecv;
      reqs[i].peer = 1 - rank;
      reqs[i].sig = sigs[i];
      if (rank == 1) reqs[i].src = bufs[i].data();
      else reqs[i].dst = bufs[i].data();
      w->post(&reqs[i]);
    }
    for (int i = 0; i < 100000 && !reqs.back().complete; ++i)
      if (!w->progress()) w->wait_activity(std::chrono::milliseconds(10));
    if (!reqs.back().complete) throw braid::Error(braid::Errc::kTimeout, "record_tcp: the pair did not finish");
  };
  std::thread t0([&] { run(0); });
  run(1);
  t0.join();
  ::unsetenv("BRAID_TCP_STREAMS");
  ::unsetenv("BRAID_TCP_ADDR");
  std::this_thread::sleep_for(200ms);
  size_t n = 0;
  for (const Flow& f : store.flows()) {
    const std::vector<uint8_t> up = after_auth(f.up);  // rank 1's side: hello, frames
    if (up.size() < sizeof(TcpHello)) continue;
    std::vector<uint8_t> seed(up.begin(), up.begin() + sizeof(TcpHello));
    size_t off = sizeof(TcpHello);
    for (const MsgSig& s : sigs) {
      if (up.size() - off < sizeof(MsgSig)) break;
      seed.insert(seed.end(), up.begin() + std::ptrdiff_t(off), up.begin() + std::ptrdiff_t(off + sizeof(MsgSig)));
      off += sizeof(MsgSig) + s.bytes;
    }
    save(out / "tcp_frame", "hello_three_headers_" + std::to_string(n), seed);
    save(out / "tcp_frame", "hello_only_" + std::to_string(n++),
         std::vector<uint8_t>(up.begin(), up.begin() + sizeof(TcpHello)));
  }
  if (n == 0) throw braid::Error(braid::Errc::kInternal, "record_tcp: no connection recorded");
}

// Rank 1, a real ShmWire, sends one message to rank 0 (played here) and
// the ring it wrote becomes the input of the target's receive.
void record_shm_one(const fs::path& out, const std::string& name, uint8_t flags, uint16_t bytes) {
  using namespace braid::comm;
  auto store = braid::comm::make_memory_store();
  TransportOptions opt;
  const WireContext ctx = braid::fuzz::shm_context(1, store.get(), &opt);
  uint8_t* base = braid::fuzz::shm_segment(ctx, 0);
  const shm::Layout l = braid::fuzz::shm_layout();
  uint8_t* ring = l.ring(base, 0);
  // rank 0's probe verdict: single copy on where the seed uses it
  reinterpret_cast<shm::RingCtl*>(ring)->cma_ok = (flags & braid::fuzz::kShmSingleCopy) ? shm::kCmaOn : shm::kCmaOff;
  store->set_str("shm/ready/0", std::to_string(l.total));
  if (flags & braid::fuzz::kShmSingleCopy) ::setenv("BRAID_SHM_CMA_BYTES", "4097", 1);
  std::unique_ptr<Wire> wire = make_shm_wire(ctx, {0});
  ::unsetenv("BRAID_SHM_CMA_BYTES");
  std::vector<uint8_t> payload(bytes, 3);
  Request r;
  r.kind = Request::Kind::kSend;
  r.peer = 0;
  r.sig = braid::fuzz::shm_sig(bytes, flags & braid::fuzz::kShmReduce);
  r.src = payload.data();
  wire->post(&r);
  for (int i = 0; i < 16; ++i) wire->progress();  // a descriptor's send waits for an ack that never comes
  save(out / "shm_ring", name, braid::fuzz::shm_ring_input(flags, bytes, ring));
  wire.reset();
  ::shm_unlink(braid::fuzz::shm_name(ctx, 0).c_str());
  ::shm_unlink(braid::fuzz::shm_name(ctx, 1).c_str());
  ::munmap(base, l.total);
}

void record_shm(const fs::path& out) {
  record_shm_one(out, "fast_box", 0, 100);
  record_shm_one(out, "empty", 0, 0);
  record_shm_one(out, "three_slots_reduce", braid::fuzz::kShmReduce, 12000);
  record_shm_one(out, "single_copy", braid::fuzz::kShmSingleCopy, 8192);
}

// gzip framing around `raw`, as the data set's .gz files have it.
std::vector<uint8_t> gzip(const std::vector<uint8_t>& raw) {
  z_stream zs{};
  if (deflateInit2(&zs, 9, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    throw braid::Error(braid::Errc::kInternal, "deflateInit2 failed");
  std::vector<uint8_t> out(deflateBound(&zs, uLong(raw.size())));
  zs.next_in = const_cast<Bytef*>(raw.data());
  zs.avail_in = uInt(raw.size());
  zs.next_out = out.data();
  zs.avail_out = uInt(out.size());
  const int rc = deflate(&zs, Z_FINISH);
  out.resize(out.size() - zs.avail_out);
  deflateEnd(&zs);
  if (rc != Z_STREAM_END) throw braid::Error(braid::Errc::kInternal, "deflate did not finish");
  return out;
}

// The dataset target's input: the installed Fashion-MNIST's first two
// images and labels (their idx headers' counts set to 2), plain and
// gzipped.
void record_dataset(const fs::path& out) {
  const std::string dir = braid::nn::FashionMnist::default_dir();
  if (!fs::exists(dir + "/train-images-idx3-ubyte.gz")) {
    std::fprintf(stderr, "no Fashion-MNIST in %s: no dataset seeds\n", dir.c_str());
    return;
  }
  std::vector<uint8_t> img = braid::nn::read_file_maybe_gz(dir + "/train-images-idx3-ubyte.gz");
  std::vector<uint8_t> lab = braid::nn::read_file_maybe_gz(dir + "/train-labels-idx1-ubyte.gz");
  img.resize(16 + 2 * 28 * 28);
  lab.resize(8 + 2);
  img[4] = img[5] = img[6] = 0, img[7] = 2;
  lab[4] = lab[5] = lab[6] = 0, lab[7] = 2;
  auto input = [](const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
    const uint16_t n = uint16_t(a.size());
    std::vector<uint8_t> v(2);
    std::memcpy(v.data(), &n, 2);
    v.insert(v.end(), a.begin(), a.end());
    v.insert(v.end(), b.begin(), b.end());
    return v;
  };
  save(out / "dataset", "two_images", input(img, lab));
  save(out / "dataset", "two_images_gz", input(gzip(img), gzip(lab)));
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
  // The model descriptions the planner's documentation gives
  // (braid/plan_model.h), each read back as the planner reads it.
  for (const std::string& spec : {std::string("gpt:layers=24,hidden=1024,heads=16,seq=1024,vocab=50257,mlp=4"),
                                  std::string("mlp:784,256,10"),
                                  std::string("dlrm:tables=26,rows=1000000,dim=64,dense=13,bottom=512/256,top=512/256,bag=1"),
                                  std::string("gpt-175b")}) {
    braid::plan::parse_model(spec);
    save(out / "model", spec.substr(0, spec.find(':')), spec);
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
  record_tcp(out);
  record_shm(out);
  record_files(out);
  record_dataset(out);
  std::printf("seeds written under %s\n", out.c_str());
  return 0;
}
