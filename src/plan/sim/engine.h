// Engine: the simulator's discrete-event core. Each rank is a Fiber that
// runs braid's real algorithm code over a SimTransport; virtual time
// advances only when every runnable rank is blocked, to the next event (a
// message's arrival, a send's buffer coming free, a compute finishing).
//
// A rank runs at the current virtual time until it waits: its
// SimTransport::progress() yields the fiber when nothing of the rank's has
// completed, and the engine resumes it at the time something has. Sends are
// eager (the bytes leave when the path is free, whether or not the receive
// is posted); the j-th send on a channel (src → dst) meets the j-th receive,
// their signatures must agree (Error(kMismatch) otherwise), and a receive
// completes at max(arrival, posted, the channel's previous completion),
// plus B·γ on the receiving rank's processor for a receive-reduce (a rank
// reduces one message at a time, on a core of its host's pool when the
// host's ranks outnumber its cores; a receive met with a message already
// there is placed once its rank waits, after the sends it posted
// meanwhile). An algorithm's local copies take γ a byte on its processor
// (Context::copy). With carry_data the payloads move and reduce for real
// (braid/reduce.h); without, only sizes travel, and every message's bytes
// are multiplied by byte_scale (the algorithm ran on 1/byte_scale of the
// elements, so that thousands of ranks fit in memory).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <queue>
#include <string>
#include <unordered_map>
#include <vector>

#include "comm/transport/transport.h"
#include "plan/sim/fiber.h"
#include "plan/sim/network.h"
#include "plan/sim/trace.h"

namespace braid::plan::sim {

struct EngineConfig {
  double gamma_s_per_b = 0;  // reduction time per byte
  double copy_s_per_b = 0;   // a rank's copy between its buffers (Context::copy), per byte
  bool carry_data = false;
  double byte_scale = 1;
  Trace* trace = nullptr;  // records messages and reductions when set
};

class Engine {
 public:
  Engine(Network& net, const EngineConfig& cfg);
  ~Engine();
  // Rank `rank`'s program; runs from time 0 once run() is called.
  void spawn(int rank, std::function<void()> body);
  // Runs every rank to its end. Throws the first rank's error, or
  // Error(kInternal) naming the ranks still waiting when no event is left
  // (a deadlock of the algorithms played).
  void run();
  double now() const { return now_; }
  double finished_at(int rank) const { return ranks_[size_t(rank)].finished; }
  Network& network() { return net_; }
  const EngineConfig& config() const { return cfg_; }
  // The rank whose fiber runs now.
  int current() const { return current_; }

  // For SimTransport: `self` posts r (r->peer is a global rank).
  void post(int self, comm::Request* r);
  // True once something of self's completed since the last call; when
  // nothing has, yields until something does.
  bool progress(int self);
  // From rank `self`'s fiber: spends `seconds` of compute (`what` names it
  // in the trace), on a core of its host's pool when the host's ranks
  // outnumber its cores (Network::compute); returns when it has ended.
  void compute(int self, double seconds, const char* what);
  // From rank `self`'s fiber: a local copy of `bytes` of the algorithm's
  // (scaled by byte_scale), timed at copy_s_per_b.
  void copied(int self, double bytes) {
    compute(self, bytes * cfg_.byte_scale * cfg_.copy_s_per_b, "copy");
  }

 private:
  struct Msg {
    double arrival = 0;
    double bytes = 0;
    comm::MsgSig sig;
    std::vector<uint8_t> data;  // carry_data: the payload, staged
  };
  struct Pending {
    comm::Request* r = nullptr;
    double posted = 0;
  };
  struct Chan {
    std::deque<Pending> recvs;  // posted, not yet met
    std::deque<Msg> msgs;       // arrived or on their way, not yet met
    double last_done = 0;
  };
  struct RankState {
    std::unique_ptr<Fiber> fiber;
    std::unordered_map<int, Chan> in;  // by source rank
    int last_src = -1;                 // in[last_src], looked up last
    Chan* last = nullptr;
    uint32_t completed = 0;  // completions since progress() last looked
    bool waiting = false;
    double cpu_free = 0;
    double finished = -1;
    // Receives this rank met, while it ran, with messages already there:
    // their copy out or reduction is placed when it next waits, after the
    // sends it posts meanwhile (braid's progress moves a rank's sends and
    // receives in turn, not each receive before the sends posted with it).
    struct Met {
      int src;
      Pending p;
      Msg m;
    };
    std::vector<Met> met;
  };
  struct Event {
    double t;
    uint64_t seq;
    int rank;
    comm::Request* r;  // null: a wake-up (compute finished)
    bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
  };
  void schedule(double t, int rank, comm::Request* r);
  // Meets receive p with message m on channel (src → dst); schedules the completion.
  void meet(int src, int dst, Chan& ch, const Pending& p, Msg& m, const void* live_src);
  void block(int self);
  Chan& chan(int src, int dst);  // dst's channel from src

  Network& net_;
  EngineConfig cfg_;
  std::vector<RankState> ranks_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  std::vector<int> runnable_;
  double now_ = 0;
  uint64_t seq_ = 0;
  int current_ = -1;
};

// The Transport a simulated rank's algorithm runs over: a group of
// `members` global ranks (null: all of them, identity), this rank being
// group rank `me`. Requests name group ranks; the engine sees global ones.
class SimTransport : public comm::Transport {
 public:
  SimTransport(Engine& e, const std::vector<int>* members, int me);
  void post(comm::Request* r) override;
  bool progress() override;
  void wait_activity(std::chrono::microseconds) override {}
  std::string kind_to(int) const override { return "sim"; }
  std::string describe_peer(int peer) const override;
  std::string describe_self() const override;
  void abort(const std::string&) override {}
  // An algorithm's local copy: bytes·γ on this rank (as its formula prices it).
  void copied(size_t bytes) override;

 private:
  int global(int group_rank) const;
  Engine& e_;
  const std::vector<int>* members_;
  int me_, self_;
};

}  // namespace braid::plan::sim
