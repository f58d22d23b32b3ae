// Chain replication's configuration. Private to src/ps.
//
// Shard s (the keys the Layout places on server s) is kept by the chain
// s, s+1, …, s+R−1 (mod S). The configuration's variable parts, kept in the
// job's store, are the servers declared dead (keys "ps/dead/<p>") and the
// servers that joined a shard's chain (keys "ps/joined/<s>/<i>" = the
// member's id, i = 0, 1, … in join order; chain_join.h). A joining server
// has an id >= S that is never reused (replacement_id, braid/ps.h). The
// epoch is the number of deaths plus the number of joins. Entries are only
// ever added, so every process's view moves through the same sequence of
// configurations and a larger epoch is always the newer view. A shard's live
// chain is its original chain followed by its joined members, in join order,
// without the dead ones: the first is the head (takes writes), the last the
// tail (serves reads). A join therefore always appends a new tail.
//
// Who declares a death: whoever sees a connection to a server close without
// an error reply (a SIGKILLed or crashed process): a worker reading a reply,
// or a chain member forwarding a write. A declared server is never taken
// back; a replacement joins under a new id.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "braid/store.h"

namespace braid::ps {

class ChainView {
 public:
  // Throws kInvalidArgument unless 1 <= replicas <= servers.
  ChainView(int servers, int replicas, std::shared_ptr<Store> store);

  int servers() const { return S_; }
  int replicas() const { return R_; }
  // The shards server p keeps a replica of (its own first).
  std::vector<int> shards_of(int p) const;
  // Shard s's live chain, head first; throws kPeerDied naming the shard
  // when every member is dead.
  std::vector<int> chain(int s) const;
  int head(int s) const { return chain(s).front(); }
  int tail(int s) const { return chain(s).back(); }
  // p's live successor in shard s's chain; -1 when p is the tail.
  int successor(int s, int p) const;
  // Whether p is a live member of shard s's chain.
  bool member(int s, int p) const;
  // The shards whose chain p was ever configured in (its original chains,
  // or those it joined), whether p is alive or dead: what a spare joins in
  // place of a dead p.
  std::vector<int> shards_with(int p) const;
  // "shard s (members a b c)", for errors.
  std::string describe(int s) const;
  uint32_t epoch() const;
  bool dead(int p) const;
  // Re-reads the dead set from the store (cheap: S key checks).
  void refresh();
  // Records p's death in the store (idempotent), then refreshes.
  void declare_dead(int p);
  // Appends `id` to shard s's chain in the store (chain_join.h: only the
  // shard's tail commits, with its writes paused), then refreshes.
  void commit_join(int s, int id);

 private:
  const int S_, R_;
  std::shared_ptr<Store> store_;
  mutable std::mutex mu_;
  std::set<int> dead_;
  std::vector<std::vector<int>> joined_;  // by shard, in join order
  uint32_t epoch_ = 0;
};

}  // namespace braid::ps
