#include "ps/chain_join.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "braid/log.h"
#include "ps/hot_sender.h"

namespace braid::ps {

namespace {

// The state travels in braid's checkpoint format, which is written to and
// read from files: a private temporary file on each side.
std::string temp_path(const char* side, int shard, uint32_t id) {
  return (std::filesystem::temp_directory_path() /
          ("braid-ps-join-" + std::to_string(::getpid()) + "-" + side + "-" +
           std::to_string(shard) + "-" + std::to_string(id) + ".ckpt"))
      .string();
}

struct TempFile {
  std::string path;
  ~TempFile() {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
};

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<uint8_t> b((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (!f.good() && !f.eof()) throw Error(Errc::kIo, "reading " + path);
  return b;
}

void write_file(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
  if (!f) throw Error(Errc::kIo, "writing " + path);
}

bool connection_lost(const Error& e) {
  return e.code() == Errc::kPeerDied || e.code() == Errc::kIo || e.code() == Errc::kTimeout;
}

// A state transfer's payload bound (the shard is trusted, authenticated
// peer data; this only stops a corrupt header from allocating without end).
constexpr uint64_t kMaxState = uint64_t(1) << 40;

}  // namespace

void send_shard_state(int fd, const wire::Header& h, ShardState& st, std::mutex& fwd_mu,
                      ChainView& view, int self, int64_t deadline) {
  const int s = int(h.key);
  const int id = int(h.worker);
  const std::string what = "parameter server " + std::to_string(self) + ", shard " +
                           std::to_string(s) + ": join of server " + std::to_string(id);
  BRAID_CHECK_ARG(h.payload == 0, what + ": a join request carries no payload");
  BRAID_CHECK_ARG(!(h.flags & wire::kCommit), what + ": a commit before the state was sent");
  BRAID_CHECK_ARG(id >= view.servers(),
                  what + ": a joining server needs a replacement's id (>= " +
                      std::to_string(view.servers()) + ")");
  std::unique_lock<std::mutex> lk(fwd_mu);  // writes pause here (chain_join.h)
  const auto locked = std::chrono::steady_clock::now();
  view.refresh();
  if (view.tail(s) != self)
    throw Error(Errc::kInvalidArgument, what + ": not the tail in chain epoch " +
                                            std::to_string(view.epoch()));
  BRAID_CHECK_ARG(!view.dead(id) && !view.member(s, id),
                  what + ": that server is already a member or dead");
  if (int(view.chain(s).size()) >= view.replicas())
    throw Error(Errc::kInvalidArgument,
                what + ": refused, " + view.describe(s) + " already has the " +
                    std::to_string(view.replicas()) + " live members of --replicas " +
                    std::to_string(view.replicas()) + " (chain epoch " +
                    std::to_string(view.epoch()) + ")");
  TempFile tmp{temp_path("out", s, uint32_t(id))};
  st.transfer_out(tmp.path);
  const std::vector<uint8_t> state = read_file(tmp.path);
  wire::Header r = h;
  r.op = uint16_t(h.op | wire::kReply);
  r.status = 0;
  r.payload = state.size();
  wire::send_frame(fd, r, state.data(), deadline, what.c_str());
  wire::Header c;
  try {
    c = wire::recv_header(fd, deadline, what.c_str());
  } catch (const Error& e) {
    throw Error(e.code() == Errc::kTimeout ? Errc::kTimeout : Errc::kProtocol,
                what + ": no commit from the joiner (" + e.what() + "); the chain is unchanged");
  }
  if (c.op != wire::kJoin || !(c.flags & wire::kCommit) || c.key != h.key || c.worker != h.worker ||
      c.payload != 0)
    throw Error(Errc::kProtocol, what + ": expected the joiner's commit (kJoin|kCommit of shard " +
                                     std::to_string(s) + " by server " + std::to_string(id) +
                                     ", no payload), got op " + std::to_string(c.op) +
                                     " flags " + std::to_string(c.flags) + " shard " +
                                     std::to_string(c.key) + " server " + std::to_string(c.worker) +
                                     "; the chain is unchanged");
  view.commit_join(s, id);
  const uint32_t epoch = view.epoch();
  lk.unlock();
  const int64_t pause_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - locked)
          .count();
  BRAID_LOG(kInfo, what << ": joined as the new tail, chain epoch " << epoch << ", writes paused "
                        << double(pause_ns) * 1e-6 << " ms");
  wire::Header done = c;
  done.op = uint16_t(c.op | wire::kReply);
  done.epoch = epoch;
  done.clock = pause_ns;
  wire::send_frame(fd, done, nullptr, deadline, what.c_str());
}

JoinReport join_chain(int shard, ShardState& st, ChainView& view, Store& store,
                      const ServerOptions& opt) {
  const std::string what = "parameter server " + std::to_string(opt.rank) +
                           " joining the chain of shard " + std::to_string(shard);
  BRAID_CHECK_ARG(view.replicas() >= 2, what + ": joins need chains (replicas >= 2)");
  BRAID_CHECK_ARG(shard >= 0 && shard < view.servers(),
                  what + ": no such shard (the job has " + std::to_string(view.servers()) + ")");
  const int64_t deadline = wire::deadline_after(opt.timeout);
  for (;;) {
    view.refresh();
    if (view.member(shard, opt.rank))  // committed; only the last reply was lost
      return JoinReport{shard, -1, view.epoch(), 0.0};
    const int tail = view.tail(shard);
    int fd = -1;
    try {
      fd = connect_peer(store, opt, tail, shard, wire::kJoinConn, deadline,
                        what + ": tail " + std::to_string(tail));
      wire::Header h;
      h.op = wire::kJoin;
      h.key = uint32_t(shard);
      h.worker = uint32_t(opt.rank);
      h.epoch = view.epoch();
      wire::send_frame(fd, h, nullptr, deadline, what.c_str());
      wire::Header r = wire::recv_header(fd, deadline, what.c_str());
      if (r.op != (wire::kJoin | wire::kReply))
        throw Error(Errc::kProtocol, what + ": unexpected reply to the join request");
      if (r.status != 0) {
        std::string msg(std::min<uint64_t>(r.payload, wire::kMaxMessage), '\0');
        wire::recv_payload(fd, msg.data(), msg.size(), deadline, what.c_str());
        wire::throw_reply(r, msg, what);
      }
      if (r.payload > kMaxState)
        throw Error(Errc::kProtocol, what + ": state of " + std::to_string(r.payload) + " bytes");
      std::vector<uint8_t> state(r.payload);
      wire::recv_payload(fd, state.data(), state.size(), deadline, what.c_str());
      {
        TempFile tmp{temp_path("in", shard, uint32_t(opt.rank))};
        write_file(tmp.path, state);
        st.transfer_in(tmp.path);
      }
      h.flags = wire::kCommit;
      wire::send_frame(fd, h, nullptr, deadline, what.c_str());
      r = wire::recv_header(fd, deadline, what.c_str());
      if (r.op != (wire::kJoin | wire::kReply) || r.status != 0)
        throw Error(Errc::kProtocol, what + ": the tail did not confirm the join");
      ::close(fd);
      view.refresh();
      if (!view.member(shard, opt.rank))
        throw Error(Errc::kInternal, what + ": the tail confirmed a join the store does not show");
      return JoinReport{shard, tail, r.epoch, double(r.clock) * 1e-9};
    } catch (const Error& e) {
      if (fd >= 0) ::close(fd);
      if (!connection_lost(e)) throw;
      if (wire::deadline_after(std::chrono::milliseconds(0)) >= deadline)
        throw Error(Errc::kTimeout, what + ": no tail completed the transfer in time: " + e.what());
      BRAID_LOG(kInfo, what << ": tail " << tail << " lost (" << e.what() << "); declaring it dead");
      view.declare_dead(tail);
    }
  }
}

}  // namespace braid::ps
