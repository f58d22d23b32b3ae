// A server joining a shard's chain as its new tail, by state transfer.
// Private to src/ps.
//
// The joiner (ServerOptions::join; an id >= S from replacement_id) listens
// and publishes its address first, then for each shard s:
//   1. connects to s's current tail (kJoinConn hello) and sends kJoin;
//   2. the tail takes the shard's forwarding lock, the one every write holds
//      while it is applied, forwarded and acknowledged (server.cc), checks it
//      is still the tail, and replies with the shard's full state
//      (ShardState::transfer_out: the shard checkpoint plus its live state);
//   3. the joiner installs it (transfer_in) and sends kJoin|kCommit;
//   4. the tail records the join in the store (ChainView::commit_join: a new
//      epoch, the joiner appended as tail), releases the lock, and replies
//      with the new epoch and, in the reply's `clock`, how long it held the
//      lock in nanoseconds (JoinReport::pause_s).
// Writes pause at the tail from step 2 to step 4: they are not lost but
// wait for the lock (their senders wait for the ack within their deadline).
// Releasing before the reply is safe: the joiner already listens and holds
// the state, so a write forwarded to it before it reads the reply is
// applied as any other.
//
// A chain never grows past R: the tail refuses a join into a chain that
// already has R live members (naming the shard and its members), as it
// refuses a join by a non-tail, by an id that is not a fresh replacement's,
// of another shard than the connection's hello named, and a commit that is
// not the joiner's well-formed kJoin|kCommit. A refusal is an error reply to
// that joiner and ends its connection only; the chain stays as it was.
// Why no acknowledged write is lost: a write is acknowledged only after the
// tail applied it under the lock, so every write acknowledged before step 2
// is in the copy; every write the tail applies after step 4 finds the
// joiner as its successor and is forwarded there, and acknowledged only
// after the joiner's ack. Nothing is applied at the tail between 2 and 4.
// Pausing rather than forwarding the writes that arrive during the copy
// keeps one write per shard in flight along the chain, which the
// duplicate-detection of re-sent writes relies on (ps/replication/write_dedup.h).
//
// A stalled joiner: steps 2 to 4 have a deadline of their own
// (join_window, bounded by the server's timeout), far shorter than the
// timeout a write waits for. Past it the tail abandons the join: it logs
// the joiner, the shard and the reason, releases the lock, answers the
// joiner with an error (or, cut mid-state, ends the stream) and serves on;
// the chain stays as it was. The joiner's late commit then reads that
// refusal, and the joiner fails with it. A joiner is a member only through
// the tail's commit_join, which the tail reaches only after sending the
// whole state and reading the matching commit on that same connection
// before the deadline, so a state half received, or received after the
// deadline, can never make its holder a member; a fresh attempt starts
// over with a fresh copy.
//
// Failures: a tail that dies during the transfer is declared dead by the
// joiner, which retries with the new tail (a tail that committed and then
// died leaves the joiner in the chain, which it sees and stops). Since a
// tail that abandons a join ends the connection as a dead one would, the
// joiner first checks that the tail no longer answers a fresh connection;
// a tail that answers is alive and the join fails instead. A joiner that
// dies before step 4 leaves the chain as it was; after step 4 it is a
// member like any other, declared dead by whoever loses its connection.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>

#include "braid/ps.h"
#include "ps/replication/chain.h"
#include "ps/shard/shard_state.h"
#include "ps/io/wire.h"

namespace braid::ps {

// How long the tail keeps a shard's writes paused for a join whose state
// is `state_bytes` long: a base plus the bytes at a conservative rate
// (chain_join.cc gives the numbers' reasons). The tail uses the smaller of
// this and its own timeout.
std::chrono::milliseconds join_window(uint64_t state_bytes);

// Tail side: runs steps 2 to 4 for the kJoin frame `h` read from `fd`
// (tail `self` of shard h.key). Throws kInvalidArgument when this server is
// not the shard's tail or the id is not a fresh replacement's, kTimeout
// when the join's deadline passed (the join abandoned); connection errors
// as wire.h.
void send_shard_state(int fd, const wire::Header& h, ShardState& st, std::mutex& fwd_mu,
                      ChainView& view, int self, int64_t deadline);

// Joiner side: steps 1 and 3 for shard `shard` into `st`, retrying with the
// next tail while tails die, until `opt.timeout`. The report's pause is the
// tail's measure (tail -1 and pause 0 when the commit's reply was lost but
// the store shows the join).
JoinReport join_chain(int shard, ShardState& st, ChainView& view, Store& store,
                const ServerOptions& opt);

}  // namespace braid::ps
