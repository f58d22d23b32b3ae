// simulate_pipeline: the schedule checker proves the schedule
// (check_schedule), then each pipeline rank's fiber plays its action list
// on the simulator's clock: a compute action spends its time, a
// communication action posts all its transfers at once (tagged as braid's
// executor tags them) and ends when every one has completed over the
// simulated links.
#include <deque>

#include "braid/error.h"
#include "braid/plan_sim.h"
#include "braid/schedule_check.h"
#include "plan/sim/engine.h"

namespace braid::plan {

PipelineSimResult simulate_pipeline(const Cluster& c, const parallel::Schedule& s,
                                    const std::vector<double>& forward,
                                    const std::vector<double>& backward, double transfer_bytes,
                                    int stride, bool trace_on) {
  using parallel::ActionKind;
  if (s.ranks < 1 || stride < 1)
    throw Error(Errc::kInvalidArgument, "simulate_pipeline: ranks and stride must be >= 1");
  if (forward.size() != size_t(s.stages()) || backward.size() != size_t(s.stages()))
    throw Error(Errc::kInvalidArgument, "simulate_pipeline: " + std::to_string(s.stages()) +
                                            " virtual stages, but " +
                                            std::to_string(forward.size()) + " forward and " +
                                            std::to_string(backward.size()) + " backward times");
  if (transfer_bytes < 0)
    throw Error(Errc::kInvalidArgument, "simulate_pipeline: transfer_bytes must be >= 0");
  parallel::check_schedule(s);  // well formed and deadlock-free, or Error naming why

  sim::Network net(c, (s.ranks - 1) * stride + 1);
  sim::Trace trace;
  sim::EngineConfig cfg;
  cfg.trace = trace_on ? &trace : nullptr;
  sim::Engine eng(net, cfg);
  std::vector<double> busy(size_t(s.ranks), 0), comm_s(size_t(s.ranks), 0);
  for (int p = 0; p < s.ranks; ++p) {
    eng.spawn(p * stride, [&, p] {
      const int self = p * stride;
      std::deque<comm::Request> reqs;
      for (const parallel::Action& a : s.actions[size_t(p)]) {
        if (a.kind == ActionKind::kForward || a.kind == ActionKind::kBackward) {
          const bool fwd = a.kind == ActionKind::kForward;
          const size_t v = size_t(s.stage_of(p, a.chunk));
          const double t = fwd ? forward[v] : backward[v];
          busy[size_t(p)] += t;
          eng.compute(self, t, fwd ? "forward" : "backward");
          continue;
        }
        if (a.kind != ActionKind::kComm) continue;
        const double t0 = eng.now();
        reqs.clear();
        for (const parallel::Transfer& t : a.transfers) {
          comm::Request& r = reqs.emplace_back();
          r.kind = t.send ? comm::Request::Kind::kSend : comm::Request::Kind::kRecv;
          r.peer = t.peer * stride;
          r.sig.op = comm::CollOp::kSend;
          r.sig.root = int32_t(parallel::transfer_tag(s, t));
          r.sig.bytes = uint64_t(transfer_bytes);
          eng.post(self, &r);
        }
        for (comm::Request& r : reqs)
          while (!r.complete) eng.progress(self);
        comm_s[size_t(p)] += eng.now() - t0;
      }
    });
  }
  eng.run();
  PipelineSimResult res;
  double total_busy = 0;
  for (int p = 0; p < s.ranks; ++p) {
    res.makespan = std::max(res.makespan, eng.finished_at(p * stride));
    total_busy += busy[size_t(p)];
    res.transfer_s += comm_s[size_t(p)];
  }
  res.bubble = res.makespan > 0 ? 1 - total_busy / (s.ranks * res.makespan) : 0;
  if (trace_on) res.trace_json = trace.json(net.ranks(), net.devices_per_host());
  return res;
}

}  // namespace braid::plan
