// simulate_collective: one fiber per rank runs the registry entry's code
// (or, for "hier", the three registry steps all_reduce_hier runs on its
// host and leader communicators: a tree reduce inside each host, a ring
// among the hosts' first ranks, a chain broadcast inside each host) over a
// SimTransport, on the engine's virtual clock.
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>

#include "braid/error.h"
#include "braid/plan_cost.h"
#include "braid/plan_sim.h"
#include "braid/tuning.h"
#include "comm/algo/algorithms.h"
#include "comm/algo/registry.h"
#include "comm/algo/select.h"
#include "plan/sim/engine.h"

namespace braid::plan {
namespace {

using comm::CollOp;
using comm::Context;
using comm::ContextPool;
using comm::MsgSig;
namespace algo = comm::algo;

constexpr uint64_t kNoDeadline = std::numeric_limits<uint64_t>::max() / 4;
// Without payloads, a rank's scratch buffers (up to the call's size) are
// what bounds the world: the algorithm runs on fewer elements until all
// ranks' worth fits in this.
constexpr double kScratchBudget = double(256 << 20);

struct Shape {
  size_t count = 0;       // the call's count argument (elements)
  size_t send_elems = 0;  // buffer sizes a rank needs
  size_t recv_elems = 0;
};

Shape shape_of(CollOp op, size_t elems, int n) {
  Shape s;
  switch (op) {
    case CollOp::kAllGather:  // natural size: the whole output
      s.count = elems / size_t(n);
      s.send_elems = s.count;
      s.recv_elems = elems;
      break;
    case CollOp::kReduceScatter:  // natural size: the whole input
      s.count = elems / size_t(n);
      s.send_elems = elems;
      s.recv_elems = s.count;
      break;
    default:
      s.count = s.send_elems = s.recv_elems = elems;
  }
  return s;
}

MsgSig sig_of(CollOp op, uint64_t seq, size_t count, int root, ReduceOp rop) {
  MsgSig s;
  s.seq = seq;
  s.count = count;
  s.root = root;
  s.op = op;
  s.dtype = DType::kF32;
  s.rop = rop;
  return s;
}

void default_fill(int rank, float* buf, size_t count) {
  for (size_t i = 0; i < count; ++i) buf[i] = float((rank + 1) * int(i % 7 + 1));
}

}  // namespace

double closed_form_seconds(const Cluster& c, const std::string& collective,
                           const std::string& algo, size_t bytes, int ranks, int stride,
                           size_t chunk_bytes) {
  comm::GroupLinks g = place_group(c, ranks, stride).links;
  g.chunk_bytes = chunk_bytes;
  return comm::price_algorithm(collective, algo, bytes, g);
}

SimResult simulate_collective(const Cluster& c, const std::string& collective,
                              const std::string& algo_name, size_t bytes, int ranks,
                              const SimOptions& o) {
  const auto wall0 = std::chrono::steady_clock::now();
  const CollOp op = comm::parse_coll_op(collective);
  if (op != CollOp::kAllReduce && op != CollOp::kBroadcast && op != CollOp::kReduce &&
      op != CollOp::kAllGather && op != CollOp::kReduceScatter)
    throw Error(Errc::kInvalidArgument, "simulator: collective '" + collective +
                                            "' is not simulated (all_reduce, broadcast, reduce, "
                                            "all_gather, reduce_scatter)");
  const algo::Algorithm* a = algo::find(op, algo_name);
  if (a == nullptr)
    throw Error(Errc::kInvalidArgument, "simulator: unknown algorithm '" + algo_name + "' for " +
                                            collective + " (choose from: " + algo::names(op) + ")");
  if (ranks < 1) throw Error(Errc::kInvalidArgument, "simulator: ranks must be >= 1");
  if (bytes % (4 * size_t(ranks)) != 0)
    throw Error(Errc::kInvalidArgument, "simulator: bytes (" + std::to_string(bytes) +
                                            ") must be a multiple of 4 x ranks (" +
                                            std::to_string(4 * ranks) + ")");
  if (o.stride < 1 || o.groups < 1 || o.group_stride < 1)
    throw Error(Errc::kInvalidArgument, "simulator: stride, groups and group_stride must be >= 1");
  const bool hier = a->id == algo::AlgoId::kHier;
  const int devices = (ranks - 1) * o.stride + (o.groups - 1) * o.group_stride + 1;
  // braid's CPU ranks over shared memory, where the cluster says how they
  // copy through memory (plan::HostMemory): each copy into or out of a
  // slot, each reduction and local copy, at the rate of the call's working
  // set, the buffers of the host's ranks (out of place: input and output).
  Cluster sized = c;
  double gamma = place_group(c, ranks, o.stride).links.gamma_s_per_b;
  double copy = gamma;  // a local copy, priced as a reduction pass
  if (c.memory.modelled() && c.device.runtime == Runtime::kBraidCpu) {
    const Shape whole = shape_of(op, bytes / 4, ranks);
    const double on_host = std::min(ranks * o.groups, std::max(1, c.devices_per_host));
    const double ws = on_host * 4.0 * double(whole.send_elems + whole.recv_elems);
    sized.intra_host.cost.beta_s_per_b = 2 * c.memory.copy_s_per_b(ws);  // two copies a message
    gamma = c.memory.reduce_s_per_b(ws);
    copy = c.memory.local_copy_s_per_b(ws);
  }
  sim::Network net(sized, devices);
  const int D = net.devices_per_host();
  // Group g's member i is device g·group_stride + i·stride; its hosts, and for "hier"
  // its members on each host and the first member of each host.
  struct Group {
    std::vector<int> members;
    std::vector<std::vector<int>> local;  // by host of the group
    std::vector<int> leaders;                // the first member on each host
    std::vector<int> host_index, local_rank;  // by member
  };
  std::vector<Group> groups(size_t(o.groups));
  for (int g = 0; g < o.groups; ++g) {
    Group& G = groups[size_t(g)];
    for (int i = 0; i < ranks; ++i) {
      const int dev = g * o.group_stride + i * o.stride;
      G.members.push_back(dev);
      if (G.local.empty() || net.host_of(G.local.back().front()) != net.host_of(dev)) {
        G.local.emplace_back();
        G.leaders.push_back(dev);
      }
      G.host_index.push_back(int(G.local.size()) - 1);
      G.local_rank.push_back(int(G.local.back().size()));
      G.local.back().push_back(dev);
    }
  }
  std::vector<char> taken(size_t(devices), 0);
  for (const Group& G : groups)
    for (int d : G.members)
      if (taken[size_t(d)]++)
        throw Error(Errc::kInvalidArgument, "simulator: groups overlap at device " +
                                                std::to_string(d) + " (stride " +
                                                std::to_string(o.stride) + ", group_stride " +
                                                std::to_string(o.group_stride) + ")");
  const int hosts = int(groups[0].local.size());
  algo::Fit fit{ranks, hosts, false, false};
  if (a->id == algo::AlgoId::kChain && op == CollOp::kAllReduce)
    throw Error(Errc::kInvalidArgument, "simulator: all_reduce 'chain' folds into shared memory, "
                                        "which the simulator does not model");
  if (a->id == algo::AlgoId::kShared)
    throw Error(Errc::kInvalidArgument, "simulator: '" + algo_name +
                                            "' works in shared memory, which the simulator does "
                                            "not model");
  if (const char* why = a->why_not(fit))
    throw Error(Errc::kInvalidArgument, "simulator: " + collective + " '" + algo_name +
                                            "' cannot run on " + std::to_string(ranks) +
                                            " ranks of " + c.name + ": it " + why);

  // The scale: the elements the algorithm runs on (a multiple of ranks, at
  // least 16 a rank), and what each message's bytes count for.
  const size_t elems = bytes / 4;
  size_t run_elems = elems;
  const double fibers = double(ranks) * o.groups;
  if (!o.carry_data && double(bytes) * fibers > kScratchBudget) {
    const size_t fit = size_t(kScratchBudget / fibers / 4) / size_t(ranks) * size_t(ranks);
    run_elems = std::min(elems, std::max(fit, 16 * size_t(ranks)));
  }
  const double scale = double(elems) / double(run_elems);
  const Shape sh = shape_of(op, run_elems, ranks);
  const size_t chunk = std::max<size_t>(4, size_t(double(o.chunk_bytes) / scale));

  SimResult res;
  res.collective = collective;
  res.algorithm = a->name;
  res.ranks = ranks;
  res.bytes = bytes;
  res.byte_scale = scale;

  sim::Trace trace(o.trace_limit);
  sim::EngineConfig cfg;
  cfg.gamma_s_per_b = gamma;
  cfg.copy_s_per_b = copy;
  cfg.carry_data = o.carry_data;
  cfg.byte_scale = scale;
  cfg.trace = o.trace ? &trace : nullptr;
  sim::Engine eng(net, cfg);

  // Buffers: each rank's own with payloads, else one input and one output
  // shared by all (only sizes travel; what the algorithms copy locally
  // lands there). Distinct, so that a call is out of place, as the
  // formulas price it (hd's copy of its input, Context::copy).
  // (With payloads, buffers are by member of group 0; the other groups,
  // if any, move sizes only.)
  std::vector<std::vector<float>> sendb, recvb;
  std::vector<float> shared, shared_in;
  if (o.carry_data) {
    if (o.groups != 1)
      throw Error(Errc::kInvalidArgument, "simulator: carry_data runs one group");
    sendb.resize(size_t(ranks));
    recvb.resize(size_t(ranks));
    for (int r = 0; r < ranks; ++r) {
      sendb[size_t(r)].assign(sh.send_elems, 0.f);
      recvb[size_t(r)].assign(sh.recv_elems, 0.f);
      (o.fill ? o.fill : default_fill)(r, sendb[size_t(r)].data(), sh.send_elems);
    }
    if (op == CollOp::kBroadcast) recvb[0] = sendb[0];  // the root's buffer is the input
  } else {
    shared.assign(std::max(sh.send_elems, sh.recv_elems) + 16, 0.f);
    shared_in.assign(shared.size(), 0.f);
  }

  std::vector<ContextPool> pools(size_t(ranks) * size_t(o.groups));
  const auto rop = ReduceOp::kSum;
  for (int g = 0; g < o.groups; ++g)
  for (int r = 0; r < ranks; ++r) {
    eng.spawn(groups[size_t(g)].members[size_t(r)], [&, g, r] {
      const Group& G = groups[size_t(g)];
      ContextPool& pool = pools[size_t(g) * size_t(ranks) + size_t(r)];
      void* sbuf = o.carry_data ? static_cast<void*>(sendb[size_t(r)].data()) : shared_in.data();
      void* rbuf = o.carry_data ? static_cast<void*>(recvb[size_t(r)].data()) : shared.data();
      auto describe = [&] { return collective + " " + algo_name + " (simulated)"; };
      algo::Call call;
      call.send = sbuf;
      call.recv = rbuf;
      call.count = sh.count;
      call.root = 0;
      call.chunk_bytes = chunk;
      if (!hier) {
        sim::SimTransport tp(eng, &G.members, r);
        const bool rooted = op == CollOp::kBroadcast || op == CollOp::kReduce;
        Context ctx(tp, r, ranks, sig_of(op, 1, sh.count, rooted ? 0 : -1, rop), kNoDeadline,
                    describe, pool);
        a->run(ctx, call);
        return;
      }
      // all_reduce_hier's steps (src/comm/algo/hierarchical.cc).
      const int h = G.host_index[size_t(r)], lr = G.local_rank[size_t(r)];
      const std::vector<int>& local = G.local[size_t(h)];
      const int L = int(local.size());
      algo::copy_if_distinct(rbuf, sbuf, sh.count * 4);
      call.send = rbuf;
      {
        sim::SimTransport tp(eng, &local, lr);
        Context ctx(tp, lr, L, sig_of(CollOp::kReduce, 1, sh.count, 0, rop), kNoDeadline,
                    describe, pool);
        algo::get(CollOp::kReduce, algo::AlgoId::kTree).run(ctx, call);
      }
      if (lr == 0 && hosts > 1) {
        sim::SimTransport tp(eng, &G.leaders, h);
        Context ctx(tp, h, hosts, sig_of(CollOp::kAllReduce, 2, sh.count, -1, rop), kNoDeadline,
                    describe, pool);
        algo::Call ring = call;
        ring.root = -1;
        algo::get(CollOp::kAllReduce, algo::AlgoId::kRing).run(ctx, ring);
      }
      {
        sim::SimTransport tp(eng, &local, lr);
        Context ctx(tp, lr, L, sig_of(CollOp::kBroadcast, 3, sh.count, 0, rop), kNoDeadline,
                    describe, pool);
        algo::get(CollOp::kBroadcast, algo::AlgoId::kChain).run(ctx, call);
      }
    });
  }
  eng.run();

  for (const Group& G : groups)
    for (int d : G.members) res.seconds = std::max(res.seconds, eng.finished_at(d));
  res.messages = net.messages();
  for (auto k : {sim::LinkKind::kIntraHost, sim::LinkKind::kInterHost, sim::LinkKind::kSpine})
    res.bytes_by_link[sim::link_kind_name(k)] = net.bytes(k);
  res.waited_s = net.waited_s();
  if (o.carry_data) {
    res.outputs = std::move(recvb);
  }
  if (o.trace) {
    for (const Group& G : groups)
      for (int d : G.members)
        trace.span(net.host_of(d), d, collective + " " + algo_name, 0, eng.finished_at(d));
    res.trace_json = trace.json(devices, D);
    res.trace_dropped = trace.dropped();
  }
  res.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  return res;
}

}  // namespace braid::plan
