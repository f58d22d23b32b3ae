// The cost model's terms: collective times are the registry entry's
// formula of the algorithm the runtime selector picks, memory follows the
// ZeRO stage, and the pipeline term is the schedule checker's play (its
// extension to long schedules equals a full play).
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "braid/error.h"
#include "braid/plan_cost.h"
#include "braid/schedule.h"
#include "braid/schedule_check.h"
#include "comm/algo/registry.h"
#include "comm/algo/select.h"
#include "plan/cost/pipeline.h"

namespace {

using namespace braid;

TEST(PlanCost, CollectivePriceIsTheSelectedRegistryEntrysFormula) {
  plan::Cluster slow = plan::cluster_preset("dgx-h100");
  slow.inter_host = plan::link_class("eth-10g");  // one NIC a host: there, the hierarchy wins
  slow.nics_per_host = 1;
  std::set<std::string> seen;
  for (const plan::Cluster& c : {plan::cluster_preset("dgx-h100"), slow})
  for (auto [size, stride] : std::vector<std::pair<int, int>>{{8, 1}, {4, 2}, {16, 8}, {64, 32}, {32, 1}}) {
    const plan::Placement p = plan::place_group(c, size, stride);
    const comm::GroupLinks& g = p.links;
    comm::CostParams cp;
    cp.shm = g.inner;
    cp.tcp = g.outer;
    cp.gamma_s_per_b = g.gamma_s_per_b;
    const comm::Selector s(size, g.hosts > 1, cp, g.hosts, g.max_local, false, g.cores, g.nics);
    for (const char* op : {"all_reduce", "all_gather", "reduce_scatter"})
      for (size_t bytes : {size_t(4096), size_t(1) << 20, size_t(1) << 30}) {
        const comm::CollectivePrice r = comm::price_collective(op, bytes, g);
        const comm::CollOp o = comm::parse_coll_op(op);
        const comm::algo::Algorithm* a = comm::algo::find(o, r.algorithm);
        ASSERT_NE(a, nullptr) << r.algorithm;
        EXPECT_EQ(r.seconds, a->cost(s.inputs(bytes))) << op << " " << bytes << " " << r.algorithm;
        for (const comm::algo::Algorithm* b : comm::algo::algorithms(o))
          if (!s.why_not(*b)) {
            EXPECT_LE(r.seconds, b->cost(s.inputs(bytes))) << b->name;
          }
        seen.insert(r.algorithm);
      }
  }
  EXPECT_TRUE(seen.count("hier")) << "a group over hosts prices the hierarchical all-reduce";
}

TEST(PlanCost, RingAllReduceByHandOnOneHost) {
  comm::GroupLinks g;
  g.ranks = 4;
  g.inner = {1e-5, 1e-9};  // slow α: the ring wins at 64 MiB
  g.gamma_s_per_b = 1e-11;
  const size_t N = size_t(64) << 20;
  // 1 MiB chunks (BRAID_CHUNK_BYTES's default), 16 a segment: the
  // link's load (busy) outlasts the last chunk's way round (path).
  const double n = 4, chunks = std::ceil(double(N) / n / (1 << 20)), c = N / n / chunks;
  const double path = (2 * (n - 1) + chunks - 1) * (1e-5 + c * 1e-9);
  const double busy = 2 * (n - 1) * chunks * c * 1e-9 + 1e-5;
  ASSERT_GT(busy, path);
  const double ring = busy + (n - 1) / n * N * 1e-11;
  const comm::CollectivePrice p = comm::price_collective("all_reduce", N, g);
  if (p.algorithm == "ring") {
    EXPECT_DOUBLE_EQ(p.seconds, ring);
  }
  EXPECT_LE(p.seconds, ring);
}

TEST(PlanCost, PlacementFollowsTheMeshAndSharesUplinks) {
  plan::Cluster c = plan::cluster_preset("dgx-h100");
  const plan::Placement tp = plan::place_group(c, 8, 1);
  EXPECT_EQ(tp.links.hosts, 1);
  EXPECT_EQ(tp.link_class, "nvswitch-h100");
  const plan::Placement dp = plan::place_group(c, 16, 8);  // one rank per host
  EXPECT_EQ(dp.links.hosts, 16);
  EXPECT_EQ(dp.links.max_local, 1);
  EXPECT_EQ(dp.link_class, "ib-ndr");
  EXPECT_TRUE(dp.spans_racks);
  EXPECT_DOUBLE_EQ(dp.links.outer.beta_s_per_b, c.inter_host.cost.beta_s_per_b);  // non-blocking
  c.spine_oversubscription = 4;
  const plan::Placement over = plan::place_group(c, 16, 32);  // one rank per rack
  EXPECT_DOUBLE_EQ(over.links.outer.beta_s_per_b, 4 * c.inter_host.cost.beta_s_per_b);
  c.nics_per_host = 1;  // eight ranks of a host share one NIC
  EXPECT_DOUBLE_EQ(plan::place_group(c, 2, 8).links.outer.beta_s_per_b, 8 * c.inter_host.cost.beta_s_per_b);
}

TEST(PlanCost, MemoryByZeroStage) {
  const plan::Cluster c = plan::cluster_preset("dgx-a100");
  const plan::ModelDesc m = plan::parse_model("gpt:layers=8,hidden=1024,heads=16,seq=512,vocab=32000");
  const double P = m.params();
  double act0 = 0;
  for (int z = 0; z <= 3; ++z) {
    plan::Layout l;
    l.dp = 8;
    l.zero = z;
    const plan::Estimate e = plan::estimate(m, c, l, 64);
    EXPECT_NEAR(e.memory.weights, z == 3 ? 2 * P / 8 + 2 * 2 * P / 8 : 2 * P, 1) << z;
    EXPECT_NEAR(e.memory.grads, z >= 2 ? 2 * P / 8 : 2 * P, 1) << z;
    EXPECT_NEAR(e.memory.optimizer, z >= 1 ? 12 * P / 8 : 12 * P, 1) << z;
    if (z == 0) act0 = e.memory.activations;
    EXPECT_EQ(e.memory.activations, act0);
    // Data parallel: the registry's price of the gradients' collective.
    const plan::Placement p = plan::place_group(c, 8, 1);
    const double G = 2 * P;
    if (z == 0) {
      EXPECT_DOUBLE_EQ(e.dp_comm_s, comm::price_collective("all_reduce", size_t(G), p.links).seconds);
    } else if (z == 1) {
      EXPECT_DOUBLE_EQ(e.dp_comm_s, comm::price_collective("reduce_scatter", size_t(G), p.links).seconds +
                                        comm::price_collective("all_gather", size_t(G), p.links).seconds);
    }
  }
}

TEST(PlanCost, RecomputationTradesMemoryForFlops) {
  const plan::Cluster c = plan::cluster_preset("dgx-h100");
  const plan::ModelDesc m = plan::parse_model("gpt:layers=8,hidden=2048,heads=16,seq=2048,vocab=32000");
  plan::Layout l;
  l.tp = 2;
  l.dp = 4;
  plan::Estimate e[3];
  for (int r = 0; r < 3; ++r) {
    l.recompute = plan::Recompute(r);
    e[r] = plan::estimate(m, c, l, 32);
    EXPECT_EQ(e[r].model_flops, e[0].model_flops);
  }
  EXPECT_GT(e[0].memory.activations, e[1].memory.activations);
  EXPECT_GT(e[1].memory.activations, e[2].memory.activations);
  EXPECT_LT(e[0].hardware_flops, e[1].hardware_flops);
  EXPECT_LT(e[1].hardware_flops, e[2].hardware_flops);
  EXPECT_LT(e[0].step_s, e[2].step_s);
  l.recompute = plan::Recompute::kNone;
  l.sequence_parallel = true;
  EXPECT_LT(plan::estimate(m, c, l, 32).memory.activations, e[0].memory.activations);
  // The step's terms add up, and MFU is model FLOPs over peak.
  const plan::Estimate& x = e[0];
  EXPECT_NEAR(x.step_s, x.compute_s + x.tp_comm_s + x.p2p_s + x.bubble_s + x.dp_exposed_s + x.optimizer_s,
              1e-9 * x.step_s);
  EXPECT_NEAR(x.mfu, x.model_flops / (x.step_s * 8 * 989.4e12), 1e-12);
}

TEST(PlanCost, BytesPerLinkClassFollowTheGroups) {
  const plan::Cluster c = plan::cluster_preset("dgx-h100");
  const plan::ModelDesc m = plan::parse_model("gpt:layers=4,hidden=1024,heads=16,seq=512,vocab=32000");
  plan::Layout l;
  l.tp = 8;
  l.dp = 2;  // tp inside a host, dp across two hosts
  const plan::Estimate e = plan::estimate(m, c, l, 8);
  ASSERT_EQ(e.comm_bytes.size(), 2u);
  // The dp all_reduce of a rank's gradients (bf16): 2(n−1)/n of them.
  EXPECT_NEAR(e.comm_bytes.at("ib-ndr"), 2.0 * (2 - 1) / 2 * (m.params() / 8 * 2), 1);
  // tp: two all_reduces forward and two backward per block and micro-batch,
  // each 2(n−1)/n of the activation, plus the embedding's, the head's and
  // the loss's.
  const double act = 1 * 512 * 1024 * 2.0, bus = 2.0 * 7 / 8;
  const double blocks = 4 * 4 * bus * act, ends = 2 * bus * act + bus * 3 * 512 * 4;
  EXPECT_NEAR(e.comm_bytes.at("nvswitch-h100"), e.micro_batches * (blocks + ends), 1);
}

TEST(PlanCost, BubbleIsTheCheckersAndLongSchedulesExtendExactly) {
  const plan::PipelineRun r = plan::run_pipeline("1f1b", 4, 8, 1, {1, 1, 1, 1}, {2, 2, 2, 2}, 0);
  EXPECT_NEAR(r.bubble, 3.0 / 11, 1e-12);
  EXPECT_NEAR(r.makespan, 33, 1e-12);
  for (int pp : {2, 4, 8}) {
    for (const char* s : {"gpipe", "1f1b", "interleaved"}) {
      const int chunks = std::string(s) == "interleaved" ? 2 : 1;
      std::vector<double> f(size_t(pp * chunks), 1.0), b(size_t(pp * chunks), 2.0);
      f.front() = 1.2, b.front() = 2.3, f.back() = 1.5, b.back() = 3.1;  // embedding, head
      for (int m : {5 * pp, 9 * pp, 16 * pp}) {
        const plan::PipelineRun line = plan::run_pipeline(s, pp, m, chunks, f, b, 0.05, true);
        const plan::PipelineRun full = plan::run_pipeline(s, pp, m, chunks, f, b, 0.05, false);
        EXPECT_NEAR(line.makespan, full.makespan, 1e-9 * full.makespan) << s << " pp=" << pp << " m=" << m;
        EXPECT_NEAR(line.bubble, full.bubble, 1e-9) << s << " pp=" << pp << " m=" << m;
        EXPECT_EQ(line.peak_live, full.peak_live) << s << " pp=" << pp << " m=" << m;
      }
    }
  }
}

TEST(PlanCost, RefusesLayoutsThatCannotRun) {
  const plan::Cluster c = plan::cluster_preset("dgx-a100");
  const plan::ModelDesc m = plan::parse_model("gpt:layers=4,hidden=1024,heads=16,seq=512,vocab=32000");
  auto why = [&](plan::Layout l, int64_t batch) {
    try {
      plan::estimate(m, c, l, batch);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  plan::Layout l;
  l.tp = 16;
  EXPECT_NE(why(l, 8).find("tp: 16 spans hosts"), std::string::npos);
  l = {};
  l.dp = 3;
  EXPECT_NE(why(l, 8).find("batch: 8 is not a multiple"), std::string::npos);
  l = {};
  l.pp = 8;
  EXPECT_NE(why(l, 8).find("fewer blocks"), std::string::npos);
  l = {};
  l.pp = 2;
  l.zero = 3;
  EXPECT_NE(why(l, 8).find("zero"), std::string::npos);
}

}  // namespace

namespace {
// Each kind of memory-bound pass runs at its own rate when the device has
// one (this-machine's probe of braid's kernels), else at the memory
// bandwidth: rates equal to the bandwidth change nothing, a GELU at half
// of it adds exactly the GELU's bytes once more (forward once, backward
// twice, every block), and AdamW at half of it doubles the optimizer step.
// (The rates' file schema: PlanCluster.ElementwiseRatesRoundTripAndBadOnesAreNamed.)
TEST(PlanCost, ElementwisePassesRunAtTheRateOfTheirKind) {
  const plan::Cluster c0 = plan::cluster_preset("eth-cpu");
  const double bw = c0.device.memory_bw;
  ASSERT_GT(bw, 0);
  const plan::ModelDesc m = plan::parse_model("gpt:layers=4,hidden=256,heads=4,seq=128,vocab=256");
  plan::Layout one;
  one.mbs = 16;
  const plan::Estimate e0 = plan::estimate(m, c0, one, 16);
  plan::Cluster c1 = c0;
  c1.device.pass_bw = {bw, bw, bw, bw};
  const plan::Estimate e1 = plan::estimate(m, c1, one, 16);
  EXPECT_NEAR(e1.step_s / e0.step_s, 1, 1e-12);
  plan::Cluster c2 = c1;
  c2.device.pass_bw.gelu = bw / 2;
  const double eb = c0.device.element_bytes(), tokens = 16 * 128,
               gelu_bytes = eb * tokens * 2 * 4 * 256;
  const double extra = 4 * 3 * gelu_bytes / bw;  // 4 blocks, forward + backward
  EXPECT_NEAR(plan::estimate(m, c2, one, 16).compute_s - e0.compute_s, extra, 1e-9 * extra);
  plan::Cluster c3 = c1;
  c3.device.pass_bw.optimizer = bw / 2;
  ASSERT_GT(e0.optimizer_s, 0);
  EXPECT_NEAR(plan::estimate(m, c3, one, 16).optimizer_s / e0.optimizer_s, 2, 1e-9);
}

// On time-shared cores a pipeline's timeline stretches only where more of
// its ranks compute than the cores hold: never below its play on cores of
// its own nor below its work over the cores, and exactly the play when
// the cores always suffice.
TEST(PlanCost, TimeSharedPipelinesStretchWhereRanksOutnumberTheCores) {
  const std::vector<double> f(4, 1.0), b(4, 2.0);
  // 4 ranks, 8 micro-batches: 96 units of work.
  const plan::PipelineRun own = plan::run_pipeline("1f1b", 4, 8, 1, f, b, 0, false, 0.25);
  EXPECT_DOUBLE_EQ(own.shared_makespan, own.makespan);  // 4 ranks, 4 cores' worth
  const plan::PipelineRun two = plan::run_pipeline("1f1b", 4, 8, 1, f, b, 0, false, 0.5);
  EXPECT_GE(two.shared_makespan, two.makespan);
  EXPECT_GE(two.shared_makespan, 96 / 2.0);          // 2 cores
  EXPECT_LT(two.shared_makespan, 2 * two.makespan);  // the bubble lends its cores
  // GPipe with one micro-batch on 2 ranks: one computes at a time (F0, F1,
  // B1, B0: 6 units), so a rank that alone wants 2 cores takes twice as
  // long, and one that wants half a core no longer.
  const std::vector<double> f2(2, 1.0), b2(2, 2.0);
  const plan::PipelineRun g = plan::run_pipeline("gpipe", 2, 1, 1, f2, b2, 0, false, 2.0);
  EXPECT_DOUBLE_EQ(g.makespan, 6);
  EXPECT_DOUBLE_EQ(g.shared_makespan, 12);
  EXPECT_DOUBLE_EQ(plan::run_pipeline("gpipe", 2, 1, 1, f2, b2, 0, false, 0.5).shared_makespan, 6);
}

// Ranks beyond a CPU host's cores time-share them: on two one-core
// devices' worth of cores, eight data-parallel ranks take about as long
// per step as two (the same work on the same two cores), not a quarter.
TEST(PlanCost, RanksBeyondTheCoresTimeShareTheirCompute) {
  plan::Cluster c = plan::cluster_preset("this-machine");
  c.cores_per_host = 2;
  ASSERT_EQ(c.device.cores, 1);
  const plan::ModelDesc m = plan::parse_model("gpt:layers=4,hidden=256,heads=4,seq=128,vocab=256");
  plan::Layout two, eight;
  two.dp = 2;
  two.mbs = 8;
  eight.dp = 8;
  eight.mbs = 2;
  const double t2 = plan::estimate(m, c, two, 16).step_s, t8 = plan::estimate(m, c, eight, 16).step_s;
  EXPECT_GT(t8, 0.8 * t2) << "dp 2 " << t2 << " s, dp 8 " << t8 << " s";
  EXPECT_LT(t8, 1.5 * t2) << "dp 2 " << t2 << " s, dp 8 " << t8 << " s";
  // A GPU device (cores 0) is never time-shared.
  c.device.cores = 0;
  EXPECT_LT(plan::estimate(m, c, eight, 16).step_s, 0.5 * t2);
}
}  // namespace
