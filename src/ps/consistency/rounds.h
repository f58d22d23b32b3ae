// A shard's consistency rounds (include/braid/ps_server.h, Consistency):
// pushes buffered per round and worker, the workers' clocks, closing a round
// (BSP and SSP: all W clocked it; k-of-n: K), late pushes dropped or
// folded, and how far a pull must wait. ASP applies each push as it comes.
// No lock of its own: its ShardState's mutex guards it (shard_state.h).
// Private to src/ps.
//
// Invariants:
//  - rounds [0, closed()) have been applied to the store, in order; round
//    closed() is open. BSP/SSP/k-of-n pushes are buffered per round and
//    per worker and folded in worker order (then folded late pushes in
//    arrival order), so a round's result does not depend on arrival order;
//  - a push is accepted only for a round in [closed, closed + ahead], where
//    ahead is 0 (BSP, k-of-n) or s (SSP): a worker cannot push past its
//    pull, and a bad client cannot make the server buffer unbounded rounds;
//  - clocks()[w] only grows; in BSP/SSP closed() == min over workers.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "braid/ps.h"
#include "ps/io/wire.h"
#include "ps/shard/param_store.h"

namespace braid::ps {

class Rounds {
 public:
  struct Round {
    std::vector<Contribution> by_worker;
    std::vector<bool> clocked;
    int n_clocked = 0;
    std::vector<Contribution> folded;
  };
  // Write-side counters (ServerStats).
  struct Counters {
    int64_t accepted = 0, late = 0, dropped = 0, folded = 0;
    int64_t max_read_lead = 0;
  };

  // `on_close` runs after each round closes (applied, counted): it may
  // throw (a failed save), and the round stays closed.
  Rounds(const ServerOptions& opt, ParamStore& store, std::function<void()> on_close);

  int64_t closed() const { return closed_; }
  const std::vector<int64_t>& clocks() const { return clocks_; }
  const std::vector<int64_t>& contributed() const { return contributed_; }
  Counters counters;

  // A push frame of round h.clock; under ASP applied at once (apply_now).
  void push(const wire::Header& h, const uint8_t* payload);
  void apply_now(const wire::Header& h, const uint8_t* payload);
  // Worker w clocked round r: closes what is complete (clock_async: ASP,
  // where the steps every worker finished count as closed rounds).
  void clock(int w, int64_t r);
  void clock_async(int w, int64_t r);
  // The rounds that must be closed before a pull at clock c is answered.
  int64_t needed_by(int64_t c) const;
  // A pull at clock c is answered now: counts its lead; the clock its
  // reply carries (k-of-n: the open round, if later).
  int64_t answered(int64_t c);

  // The live state a chain joiner copies (checkpoint/shard_transfer.cc),
  // and a restart at `step` closed rounds (a checkpoint's).
  std::map<int64_t, Round>& buffered() { return rounds_; }
  const std::map<int64_t, Round>& buffered() const { return rounds_; }
  void set_clocks(std::vector<int64_t> clocks, std::vector<int64_t> contributed);
  void restart(int64_t step);

 private:
  Round& round(int64_t r);
  void late(Contribution&& c, int64_t into);  // counts; folds into round `into`
  void try_close();

  const ServerOptions& opt_;
  const int W_;
  ParamStore& store_;
  std::function<void()> on_close_;
  int64_t closed_ = 0;
  std::map<int64_t, Round> rounds_;
  std::vector<int64_t> clocks_, contributed_;
};

}  // namespace braid::ps
