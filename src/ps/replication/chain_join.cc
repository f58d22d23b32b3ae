#include "ps/replication/chain_join.h"

#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "braid/log.h"
#include "ps/hot/hot_sender.h"
#include "ps/server_name.h"

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

// Whether server `tail` takes a fresh connection for `shard` (its hello
// answered): alive, whatever became of an earlier connection.
bool tail_answers(Store& store, const ServerOptions& opt, int tail, int shard, int64_t deadline,
                  const std::string& what) {
  try {
    ::close(connect_peer(store, opt, tail, shard, wire::kJoinConn, deadline, what));
    return true;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace

std::chrono::milliseconds join_window(uint64_t state_bytes) {
  // The base covers what does not grow with the shard: the round trips,
  // the joiner creating its temporary file and a checkpoint reader, and a
  // joiner descheduled for a moment on a host whose cores its co-located
  // workers share. That is milliseconds of work; a couple of seconds leaves
  // a wide margin while a stalled joiner stops training for no longer.
  constexpr int64_t kBaseMs = 3000;
  // Per byte, the state crosses the link once and is written to and read
  // back from a temporary file on each side (CRC-checked). 16 MiB/s is an
  // order of magnitude below a 1 Gbit/s link or a disk, so a large shard
  // over a slow or busy link still fits: 1 GiB of state gets 64 s more.
  constexpr uint64_t kBytesPerSecond = uint64_t(16) << 20;
  return std::chrono::milliseconds(kBaseMs + int64_t(state_bytes / (kBytesPerSecond / 1000)));
}

void send_shard_state(int fd, const wire::Header& h, ShardState& st, std::mutex& fwd_mu,
                      ChainView& view, int self, int64_t deadline) {
  const int s = int(h.key);
  const int id = int(h.worker);
  const std::string what =
      server_name(self) + ", shard " + std::to_string(s) + ": join of server " + std::to_string(id);
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
  // The exchange from here to the commit has the join's own deadline, so a
  // joiner that stalls holds this shard's writes for that long at most.
  const int64_t now = wire::deadline_after(std::chrono::milliseconds(0));
  const int64_t join_deadline =
      std::min(deadline, wire::deadline_after(join_window(state.size())));
  const std::string within = "within the join's deadline (" +
                             std::to_string(double(join_deadline - now) * 1e-9) + " s for " +
                             std::to_string(state.size()) + " bytes of state)";
  auto abandon = [&](const std::string& reason) {
    BRAID_LOG(kWarn, what << ": join abandoned, " << reason << "; the tail keeps serving, "
                          << "writes resume and the chain is unchanged (epoch " << view.epoch()
                          << ")");
  };
  wire::Header r = h;
  r.op = uint16_t(h.op | wire::kReply);
  r.status = 0;
  r.payload = state.size();
  // The send waits for a full socket buffer only up to the join's deadline
  // (comm::write_full polls), so a joiner that stops reading mid-state
  // cannot hold the shard's writes past it.
  try {
    wire::send_frame(fd, r, state.data(), join_deadline, what.c_str());
  } catch (const Error& e) {
    // Cut mid-frame: end the stream, so that no error reply is read as
    // state; the joiner sees a short transfer and cannot commit it.
    ::shutdown(fd, SHUT_RDWR);
    const std::string reason =
        (e.code() == Errc::kTimeout ? "the state was not taken " + within
                                    : std::string("the state could not be sent")) +
        " (" + e.what() + ")";
    abandon(reason);
    throw Error(e.code(), what + ": " + reason + "; join abandoned, the chain is unchanged");
  }
  wire::Header c;
  try {
    c = wire::recv_header(fd, join_deadline, what.c_str());
  } catch (const Error& e) {
    if (e.code() == Errc::kTimeout) {
      abandon("no commit from the joiner " + within);
      throw Error(Errc::kTimeout, what + ": no commit from the joiner " + within +
                                      "; join abandoned, the chain is unchanged");
    }
    throw Error(Errc::kProtocol,
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
  const std::string what =
      server_name(opt.rank) + " joining the chain of shard " + std::to_string(shard);
  BRAID_CHECK_ARG(view.replicas() >= 2, what + ": joins need chains (replicas >= 2)");
  BRAID_CHECK_ARG(shard >= 0 && shard < view.servers(),
                  what + ": no such shard (the job has " + std::to_string(view.servers()) + ")");
  const int64_t deadline = wire::deadline_after(opt.timeout);
  int64_t open_rounds = 0;  // of the state installed last
  for (;;) {
    view.refresh();
    if (view.member(shard, opt.rank))  // committed; only the last reply was lost
      return JoinReport{shard, -1, view.epoch(), 0.0, open_rounds};
    const int tail = view.tail(shard);
    const std::string at = what + ": tail " + std::to_string(tail);
    int fd = -1;
    bool connected = false, refused = false;
    // An error reply: the tail is alive and refuses this join.
    auto check_reply = [&](const wire::Header& r) {
      if (r.op != (wire::kJoin | wire::kReply))
        throw Error(Errc::kProtocol, at + ": unexpected reply to the join");
      if (r.status == 0) return;
      refused = true;
      std::string msg(std::min<uint64_t>(r.payload, wire::kMaxMessage), '\0');
      wire::recv_payload(fd, msg.data(), msg.size(), deadline, at.c_str());
      wire::throw_reply(r, msg, at + " refused the join");
    };
    try {
      fd = connect_peer(store, opt, tail, shard, wire::kJoinConn, deadline, at);
      connected = true;
      wire::Header h;
      h.op = wire::kJoin;
      h.key = uint32_t(shard);
      h.worker = uint32_t(opt.rank);
      h.epoch = view.epoch();
      wire::send_frame(fd, h, nullptr, deadline, what.c_str());
      wire::Header r = wire::recv_header(fd, deadline, what.c_str());
      check_reply(r);
      if (r.payload > kMaxState)
        throw Error(Errc::kProtocol, what + ": state of " + std::to_string(r.payload) + " bytes");
      std::vector<uint8_t> state(r.payload);
      wire::recv_payload(fd, state.data(), state.size(), deadline, what.c_str());
      {
        TempFile tmp{temp_path("in", shard, uint32_t(opt.rank))};
        write_file(tmp.path, state);
        open_rounds = st.transfer_in(tmp.path);
      }
      h.flags = wire::kCommit;
      wire::send_frame(fd, h, nullptr, deadline, what.c_str());
      r = wire::recv_header(fd, deadline, what.c_str());
      check_reply(r);  // e.g. the commit came after the tail's join deadline
      ::close(fd);
      view.refresh();
      if (!view.member(shard, opt.rank))
        throw Error(Errc::kInternal, what + ": the tail confirmed a join the store does not show");
      return JoinReport{shard, tail, r.epoch, double(r.clock) * 1e-9, open_rounds};
    } catch (const Error& e) {
      if (fd >= 0) ::close(fd);
      if (refused || !connection_lost(e)) throw;
      if (wire::deadline_after(std::chrono::milliseconds(0)) >= deadline)
        throw Error(Errc::kTimeout, what + ": no tail completed the transfer in time: " + e.what());
      // A tail that abandons a join past its deadline (send_shard_state)
      // ends the connection, mid-state perhaps, as a dead one would: only a
      // tail that no longer answers a fresh connection is declared dead.
      if (connected && tail_answers(store, opt, tail, shard, deadline, at))
        throw Error(Errc::kTimeout, at + " is alive but ended the transfer (" + e.what() +
                                        "): a tail abandons a join not committed within the "
                                        "join's deadline; the chain is unchanged");
      BRAID_LOG(kInfo, what << ": tail " << tail << " lost (" << e.what() << "); declaring it dead");
      view.declare_dead(tail);
    }
  }
}

}  // namespace braid::ps
