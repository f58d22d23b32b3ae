// The parameter server's frames. Private to src/ps.
//
// Every frame is a fixed 64-byte header followed by `payload` bytes. A
// request names ONE key range: a dense key's [offset, offset + count), or
// `count` rows of a sparse key (payload: count int64 row ids, then, for a
// push, count·width floats). The reply echoes op | kReply, the request id
// and the key fields; `status` is 0 or an Errc + 1, and a failed reply's
// payload is the error message (at most kMaxMessage bytes).
//
// Both ends are processes of one job on one architecture, so integers are in
// host byte order. Lengths are checked against the receiver's own shapes
// (expected_payload) before any payload is read or allocated.
//
// `epoch` is the chain configuration a request was routed under (the number
// of servers declared dead, ps/replication/chain.h); a server behind it re-reads the
// configuration first. Request ids increase per worker over all its
// connections, so a chain replica can detect a re-sent write.
#pragma once

#include <sys/uio.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "braid/error.h"
#include "braid/ps.h"

namespace braid::ps::wire {

constexpr uint32_t kMagic = 0x31535042;  // "BPS1"
constexpr uint32_t kMaxMessage = 4096;
constexpr uint64_t kMaxStats = 1 << 20;

enum Op : uint16_t {
  kHello = 1,   // worker id in `worker`, shard in `key`; no payload
  kPush = 2,    // gradients of round `clock`; flag kAdvance: last push of the round
  kPull = 3,    // parameters for a worker at `clock`; reply's clock: the assigned one
  kClock = 4,   // no key: the worker finished round `clock` on this server
  kReport = 5,  // 3 doubles (loss sum, rows, correct) of round `clock`
  kStats = 6,   // reply: stats; flag kWaitRound: first wait for round `clock`;
                // flag kWaitOthers: first wait for every other worker's bye
  kBye = 7,     // the worker is done
  // Hot keys (ps.h): an owner's refresh to a peer (key: the owner shard,
  // clock: its closed rounds, count: rows; payload hot_keys.h); a worker's
  // pull of hot rows from a replica (key, offset: the owner shard, count
  // rows, payload row ids); a worker asking the owner for its hot set
  // (reply: int64 key, row pairs).
  kHotPush = 8,
  kHotPull = 9,
  kHotSet = 10,
  // Several requests of one worker to one server in one frame (replicas 1):
  // `count` sub-frames, the payload their concatenation, each a header and
  // its payload as if sent alone. The server runs them in order under one
  // lock, released only while a hot pull reads the replicas; the reply's
  // payload is their replies, concatenated the same way. Sub-frames are
  // push, pull, clock, report, stats or hot pull; a failing one fails the
  // whole batch (those before it stay applied, as separate frames would).
  // Why: a training step is tens of key ranges per server, and a frame each
  // made a step a few hundred syscalls and thread wake-ups.
  kBatch = 11,
  // On a kJoinConn connection only (chain_join.h): a joining server (id in
  // `worker`) asks the shard's tail for the shard's state, the reply's
  // payload; then, flagged kCommit, confirms it installed it, and the tail
  // records the join before replying.
  kJoin = 12,
  kReply = 0x80,
};

// kChain (on hello): the connection comes from the shard's predecessor in
// its chain; its frames are forwarded writes that name any worker.
// kHot (on hello): the connection comes from a peer server and carries
// its hot-key refreshes.
// kJoinConn (on hello): the connection comes from a server joining the
// shard's chain and carries its kJoin frames.
// kShm (on a worker's hello): the payload names a shared-memory segment
// (link.h) the worker offers; on the reply: the server mapped it, and the
// connection's frames now travel through it.
enum Flags : uint16_t {
  kAdvance = 1,
  kWaitRound = 2,
  kChain = 4,
  kHot = 8,
  kWaitOthers = 16,
  kJoinConn = 32,
  kCommit = 64,
  kShm = 128,
};

// The most sub-frames one kBatch may carry.
constexpr uint64_t kMaxBatchFrames = 4096;
inline bool batchable(uint16_t op) {
  return op == kPush || op == kPull || op == kClock || op == kReport || op == kStats ||
         op == kHotPull;
}

// Writes change a shard's state and travel down its chain (head to tail);
// every other op after hello is a read, served by the tail.
inline bool is_write(uint16_t op) {
  return op == kPush || op == kClock || op == kReport || op == kBye;
}

struct Header {
  uint32_t magic = kMagic;
  uint16_t op = 0;
  uint16_t flags = 0;
  uint64_t req = 0;
  uint32_t worker = 0;
  uint32_t key = 0;
  uint64_t offset = 0;  // dense: first element
  uint64_t count = 0;   // dense: elements; sparse: rows
  int64_t clock = 0;
  uint32_t epoch = 0;
  uint32_t status = 0;  // replies: 0 ok, else Errc + 1
  uint64_t payload = 0;
};
static_assert(sizeof(Header) == 64, "the header is 64 bytes on the wire");

const char* op_name(uint16_t op);

// Full-frame I/O with a deadline (ns, steady clock). recv_header checks the
// magic; the caller checks the rest before reading the payload.
void send_frame(int fd, const Header& h, const void* payload, int64_t deadline_ns,
                const char* what);
// Sends header, then the parts in order (gathered: a few syscalls for many
// parts); h.payload must equal their total.
void send_frame_parts(int fd, const Header& h, const std::vector<std::pair<const void*, size_t>>& parts,
                      int64_t deadline_ns, const char* what);
// Sends every byte `iov` names, in order (it is consumed).
void write_gather(int fd, std::vector<iovec>& iov, int64_t deadline_ns, const char* what);
Header recv_header(int fd, int64_t deadline_ns, const char* what);
// Throws kProtocol unless h carries the frame magic (every header reader).
void check_magic(const Header& h, const char* what);
void recv_payload(int fd, void* buf, size_t n, int64_t deadline_ns, const char* what);

// A reply carrying `e` (message cut to kMaxMessage).
Header error_reply(const Header& req, const Error& e, std::string* message);
// Throws the Error a failed reply carries, prefixed by `where`.
[[noreturn]] void throw_reply(const Header& h, const std::string& message, const std::string& where);

// ServerStats as a stats reply's payload, and back (decode checks the
// length against the worker count it carries; throws kProtocol).
void encode_stats(const ServerStats& s, std::vector<uint8_t>& out);
ServerStats decode_stats(const std::vector<uint8_t>& in);

int64_t deadline_after(std::chrono::milliseconds t);

}  // namespace braid::ps::wire
