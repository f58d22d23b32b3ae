// The simulator (braid/plan_sim.h): braid's real collective algorithms
// played over a simulated network give the serial reduction's result,
// take their closed forms' time on an uncontended network from 8 to 4096
// ranks, and slow down where flows share an oversubscribed uplink.
#include <gtest/gtest.h>

#include <cmath>

#include "braid/error.h"
#include "braid/plan_cost.h"
#include "braid/plan_sim.h"
#include "braid/schedule.h"
#include "braid/schedule_check.h"

namespace {

using namespace braid;

// One device per host, a non-blocking spine: every message crosses one
// inter-host link, as the flat closed forms of ring and hd assume.
plan::Cluster flat() {
  plan::Cluster c = plan::cluster_preset("dgx-h100");
  c.devices_per_host = 1;
  c.nics_per_host = 1;
  c.hosts_per_rack = 1 << 16;
  c.spine_oversubscription = 1;
  return c;
}

// dgx-h100 with a non-blocking spine: 8 GPUs a host, NVSwitch inside.
plan::Cluster nonblocking_dgx() {
  plan::Cluster c = plan::cluster_preset("dgx-h100");
  c.spine_oversubscription = 1;
  return c;
}

std::vector<float> serial_sum(int ranks, size_t count) {
  std::vector<float> want(count, 0.f);
  for (int r = 0; r < ranks; ++r)
    for (size_t i = 0; i < count; ++i) want[i] += float((r + 1) * int(i % 7 + 1));
  return want;
}

TEST(PlanSim, AllReduceCarriesTheSerialReduction) {
  // 12 ranks of dgx-h100: two hosts (8 + 4), so "hier" has a hierarchy;
  // 12 is not a power of two, so hd and rd fold.
  const plan::Cluster c = plan::cluster_preset("dgx-h100");
  for (int ranks : {2, 5, 12})
    for (const char* a : {"ring", "hd", "rd", "direct", "oneshot", "hier"}) {
      if (std::string(a) == "hier" && ranks <= 8) continue;
      const size_t count = size_t(ranks) * 1000;  // chunks of 1 KiB below: pipelined
      plan::SimOptions o;
      o.carry_data = true;
      o.chunk_bytes = 1024;
      const plan::SimResult r = plan::simulate_collective(c, "all_reduce", a, count * 4, ranks, o);
      const std::vector<float> want = serial_sum(ranks, count);
      ASSERT_EQ(r.outputs.size(), size_t(ranks));
      for (int k = 0; k < ranks; ++k) ASSERT_EQ(r.outputs[size_t(k)], want) << a << " rank " << k;
      EXPECT_GT(r.seconds, 0) << a;
      EXPECT_GT(r.messages, 0u) << a;
    }
}

TEST(PlanSim, OtherCollectivesCarryTheirResults) {
  const plan::Cluster c = plan::cluster_preset("dgx-h100");
  const int n = 6;
  const size_t per = 600;
  plan::SimOptions o;
  o.carry_data = true;
  o.chunk_bytes = 512;
  for (const char* a : {"tree", "chain"}) {
    const plan::SimResult r = plan::simulate_collective(c, "broadcast", a, per * n * 4, n, o);
    for (int k = 0; k < n; ++k)
      for (size_t i = 0; i < per * n; ++i)
        ASSERT_EQ(r.outputs[size_t(k)][i], float(i % 7 + 1)) << a << " rank " << k;
  }
  {
    const plan::SimResult r = plan::simulate_collective(c, "all_gather", "ring", per * n * 4, n, o);
    // Rank j's input block of `per` elements lands at block j.
    for (int k = 0; k < n; ++k)
      for (int j = 0; j < n; ++j)
        for (size_t i = 0; i < per; ++i)
          ASSERT_EQ(r.outputs[size_t(k)][size_t(j) * per + i], float((j + 1) * int(i % 7 + 1)));
  }
  {
    const plan::SimResult r = plan::simulate_collective(c, "reduce_scatter", "ring", per * n * 4, n, o);
    const std::vector<float> want = serial_sum(n, per * n);
    for (int k = 0; k < n; ++k)
      for (size_t i = 0; i < per; ++i)
        ASSERT_EQ(r.outputs[size_t(k)][i], want[size_t(k) * per + i]) << "rank " << k;
  }
}

// The simulator times messages, reductions and the local copies an
// algorithm makes through Context::copy (hd's of its input, which its
// formula prices as N·γ).
void expect_matches(const plan::Cluster& c, const char* algo, int ranks, size_t bytes,
                    double below = 0.02, bool pipelined = false) {
  const plan::SimResult r = plan::simulate_collective(c, "all_reduce", algo, bytes, ranks);
  const double want = plan::closed_form_seconds(c, "all_reduce", algo, bytes, ranks);
  EXPECT_LE(r.seconds / want, 1.02)
      << algo << " at " << ranks << " ranks, " << bytes << " bytes: simulated " << r.seconds
      << " s, closed form " << want << " s";
  EXPECT_GE(r.seconds / want, 1.0 - below)
      << algo << " at " << ranks << " ranks, " << bytes << " bytes: simulated " << r.seconds
      << " s, closed form " << want << " s";
  // One message per link at a time (a pipeline's own chunks queue behind
  // each other, so only without pipelining).
  if (!pipelined) {
    EXPECT_DOUBLE_EQ(r.waited_s, 0) << algo << " " << ranks;
  }
}

TEST(PlanSim, RingAndHalvingDoublingMatchTheirClosedForms) {
  const plan::Cluster c = flat();
  // 64 KiB a rank: within one chunk, as at thousands of ranks, where the
  // ring's formula counts each of its 2(n−1) steps as one message (with
  // more, it adds the pipeline's fill as α's where the simulated pipeline
  // overlaps them: docs/PLAN.md).
  for (int ranks : {8, 64, 512, 4096}) {
    const size_t bytes = size_t(ranks) * (64 << 10);
    expect_matches(c, "hd", ranks, bytes);
    if (ranks <= 1024) expect_matches(c, "ring", ranks, bytes);
  }
}

// A ring over hosts of eight GPUs: one hop in eight crosses a host's NIC,
// the rest NVSwitch. Each device has links of its own, so the steps walk
// the ring at the hops' mean α and β behind the NIC's load, as the formula
// prices it (at the NIC's β on every step it was 1.37× the simulation).
TEST(PlanSim, ARingWhoseHopsDifferMatchesItsClosedForm) {
  const plan::Cluster c = nonblocking_dgx();
  for (int ranks : {16, 64, 512}) expect_matches(c, "ring", ranks, size_t(ranks) * (64 << 10));
}

// Eight GPUs a host, a NIC each: hd's first log H steps cross hosts, each
// rank on its own NIC, and the rest stay on NVSwitch; its formula prices
// each part on its own links (it charged every byte to one shared host
// link before, 0.13-0.27 of the simulated time).
TEST(PlanSim, HalvingDoublingAcrossHostsMatchesItsClosedForm) {
  const plan::Cluster c = nonblocking_dgx();
  for (int ranks : {16, 64, 512})
    for (size_t bytes : {size_t(1) << 20, size_t(64) << 20})
      expect_matches(c, "hd", ranks, bytes, 0.05);
}

TEST(PlanSim, HierarchicalMatchesItsClosedForm) {
  const plan::Cluster c = nonblocking_dgx();
  // Its chain broadcast inside each host pipelines 1 MiB chunks (the
  // formula's (L − 1 + C)α + Nβ). 64 MiB: from 64 hosts on, the leaders' ring moves a segment of at
  // most one chunk per step, as its formula counts it: within 2%.
  for (int ranks : {512, 4096}) expect_matches(c, "hier", ranks, size_t(64) << 20, 0.02, true);
  // On 2 and 8 hosts the leaders' ring pipelines 32 and 8 chunks a
  // segment, and the simulated pipeline overlaps each chunk's reduction
  // with the next chunk's transfer, which the formula adds: the simulation
  // is faster, by at most 5% (docs/PLAN.md gives the terms).
  for (int ranks : {16, 64}) expect_matches(c, "hier", ranks, size_t(64) << 20, 0.05, true);
}

TEST(PlanSim, SharedOversubscribedUplinkSlowsTheExchange) {
  // Two racks of two hosts, one device each; the uplink of a rack is two
  // NIC ports' worth over the oversubscription. hd's first exchange sends
  // both hosts of a rack to the other rack at once.
  plan::Cluster c = flat();
  c.hosts_per_rack = 2;
  const size_t bytes = size_t(64) << 20;
  plan::SimOptions o;
  c.spine_oversubscription = 1;
  const plan::SimResult open = plan::simulate_collective(c, "all_reduce", "hd", bytes, 4, o);
  c.spine_oversubscription = 2;  // one lane: the two flows take turns
  const plan::SimResult shared = plan::simulate_collective(c, "all_reduce", "hd", bytes, 4, o);
  EXPECT_DOUBLE_EQ(open.waited_s, 0);
  EXPECT_GT(shared.waited_s, 0);
  // The cross-rack steps carry N/2 out and N/2 back per rank (halving's
  // first step and doubling's last): with the lane shared, each takes twice
  // as long, so the run is longer by about those steps' time, N·β.
  const double beta = c.inter_host.cost.beta_s_per_b;
  EXPECT_NEAR(shared.seconds - open.seconds, double(bytes) * beta, 0.05 * double(bytes) * beta)
      << "open " << open.seconds << " s, shared " << shared.seconds << " s";
  // The ring's flows leave a rack one at a time: no slowdown.
  c.spine_oversubscription = 1;
  const double ring_open = plan::simulate_collective(c, "all_reduce", "ring", bytes, 4, o).seconds;
  c.spine_oversubscription = 2;
  const double ring_shared = plan::simulate_collective(c, "all_reduce", "ring", bytes, 4, o).seconds;
  EXPECT_DOUBLE_EQ(ring_open, ring_shared);
}

TEST(PlanSim, RanksBeyondTheCoresTakeTurns) {
  // Eight ranks on one host: with a core each, and with two cores, which
  // every copy and reduction takes turns on, so the run lasts at least all
  // that work over two. this-machine's ranks are CPU cores: a message is
  // the sender's copy into shared memory (B·β/2) and the receiver's copy
  // out (B·β/2) or its reduction from the slot (B·γ). The ring's 2(n−1)
  // steps each move N/n a rank: n−1 of them reduce, n−1 copy.
  plan::Cluster c = plan::cluster_preset("this-machine");
  c.memory = {};  // the link's β and the cluster's γ (the memory model: below)
  c.devices_per_host = 8;
  c.cores_per_host = 8;
  const int n = 8;
  const size_t bytes = size_t(16) << 20;
  const double own = plan::simulate_collective(c, "all_reduce", "ring", bytes, n).seconds;
  c.cores_per_host = 2;
  const double shared = plan::simulate_collective(c, "all_reduce", "ring", bytes, n).seconds;
  const double beta = c.intra_host.cost.beta_s_per_b;
  const double gamma = plan::place_group(c, n, 1).links.gamma_s_per_b;
  const double work =
      (n - 1) * double(bytes) * (beta / 2 + gamma) + (n - 1) * double(bytes) * beta;
  EXPECT_GE(shared, work / 2 * (1 - 1e-9)) << "own cores " << own << " s";
  // A rank's core copies what it sends and reduces what it receives, one
  // after the other, even with a core of its own.
  EXPECT_GE(own, work / n * (1 - 1e-9));
  EXPECT_GT(shared, 1.25 * own) << "work " << work << " s";
}

TEST(PlanSim, CpuCopiesRunAtTheRateOfTheirWorkingSet) {
  // Two CPU ranks on two cores with the memory modelled (HostMemory): each
  // rank's core copies what it sends into slots, and copies out or reduces
  // what it receives, at the rates of the call's buffers (input and output
  // of both ranks: 4 N). The ring's two steps of N/2 are three copies and a
  // reduction a rank, so the call takes at least that work, and the
  // pipeline keeps both cores nearly busy: at most 15% more.
  plan::Cluster c = plan::cluster_preset("this-machine");
  c.devices_per_host = 2;
  c.cores_per_host = 2;
  c.memory.llc_bytes = 32 << 20;
  c.memory.copy_cached_s_per_b = 1 / 20e9;
  c.memory.copy_beyond_s_per_b = 1 / 12.5e9;
  c.memory.beyond_ws_bytes = 128 << 20;
  c.memory.reduce_cached_s_per_b = 1 / 60e9;
  for (size_t mib : {1, 4, 16, 64}) {
    const double bytes = double(mib << 20), ws = 4 * bytes;
    const double work = bytes / 2 * (3 * c.memory.copy_s_per_b(ws) + c.memory.reduce_s_per_b(ws));
    const double t = plan::simulate_collective(c, "all_reduce", "ring", size_t(bytes), 2).seconds;
    EXPECT_GE(t, work * (1 - 1e-9)) << mib << " MiB";
    EXPECT_LE(t, 1.15 * work) << mib << " MiB";
  }
  // Beyond the cache a byte costs more: 64 MiB takes more than 16 × 4 MiB.
  const double t4 = plan::simulate_collective(c, "all_reduce", "ring", 4 << 20, 2).seconds;
  const double t64 = plan::simulate_collective(c, "all_reduce", "ring", 64 << 20, 2).seconds;
  EXPECT_GT(t64, 1.3 * 16 * t4);
}

TEST(PlanSim, GroupsRunAtOnceWhereTheLayoutPutsThem) {
  // Every tp group of 8 (one per host) at once equals one alone: each has
  // its host's NVSwitch ports to itself. Every dp group (stride 8) at once
  // shares nothing either on dgx-h100 (a NIC per GPU, a non-blocking
  // spine): the same time as one alone.
  const plan::Cluster c = plan::cluster_preset("dgx-h100");
  const size_t bytes = size_t(8) << 20;
  plan::SimOptions tp;
  tp.group_stride = 8;
  const double one_tp = plan::simulate_collective(c, "all_reduce", "ring", bytes, 8, tp).seconds;
  tp.groups = 16;
  EXPECT_DOUBLE_EQ(plan::simulate_collective(c, "all_reduce", "ring", bytes, 8, tp).seconds, one_tp);
  plan::SimOptions dp;
  dp.stride = 8;
  const double one_dp = plan::simulate_collective(c, "all_reduce", "ring", bytes, 16, dp).seconds;
  dp.groups = 8;
  EXPECT_DOUBLE_EQ(plan::simulate_collective(c, "all_reduce", "ring", bytes, 16, dp).seconds, one_dp);
  // With one NIC a host, the eight dp groups' rings share it: slower.
  plan::Cluster one_nic = c;
  one_nic.nics_per_host = 1;
  dp.groups = 1;
  const double alone = plan::simulate_collective(one_nic, "all_reduce", "ring", bytes, 16, dp).seconds;
  dp.groups = 8;
  EXPECT_GT(plan::simulate_collective(one_nic, "all_reduce", "ring", bytes, 16, dp).seconds, 4 * alone);
}

TEST(PlanSim, TraceIsChromeJson) {
  plan::SimOptions o;
  o.trace = true;
  const plan::SimResult r =
      plan::simulate_collective(nonblocking_dgx(), "all_reduce", "hier", size_t(1) << 20, 16, o);
  EXPECT_EQ(r.trace_json.rfind("{\"displayTimeUnit\"", 0), 0u);
  EXPECT_NE(r.trace_json.find("\"ph\":\"X\""), std::string::npos);
  EXPECT_NE(r.trace_json.find("(inter_host)"), std::string::npos);
  EXPECT_NE(r.trace_json.find("\"name\":\"reduce\""), std::string::npos);
  EXPECT_EQ(r.trace_dropped, 0u);
}

TEST(PlanSim, BadInputIsNamed) {
  const plan::Cluster c = plan::cluster_preset("dgx-h100");
  EXPECT_THROW(plan::simulate_collective(c, "all_reduce", "nope", 4096, 8), Error);
  EXPECT_THROW(plan::simulate_collective(c, "all_reduce", "hier", 4096, 8), Error);  // one host
  EXPECT_THROW(plan::simulate_collective(c, "all_reduce", "ring", 4098, 8), Error);
  EXPECT_THROW(plan::simulate_collective(c, "all_reduce", "shared", 4096, 8), Error);
  plan::SimOptions o;
  o.stride = 2;
  o.groups = 3;  // group 2's members 2, 4, ... are group 0's
  EXPECT_THROW(plan::simulate_collective(c, "all_reduce", "ring", 4096, 4, o), Error);
}

}  // namespace

namespace {

// The schedule checker's play with buffered sends and free transfers is
// the simulator's with zero-byte messages on links of no latency: both
// play the same real schedule with the same compute times.
TEST(PlanSim, PipelinePlaysTheRealScheduleAsTheChecker) {
  plan::Cluster c = plan::cluster_preset("dgx-h100");
  c.intra_host.cost.alpha_s = 0;
  for (const char* name : {"gpipe", "1f1b", "interleaved"}) {
    const int pp = 4, m = 8, chunks = std::string(name) == "interleaved" ? 2 : 1;
    const parallel::Schedule s = parallel::make_schedule(name, pp, m, chunks);
    std::vector<double> fwd, bwd;
    for (int v = 0; v < pp * chunks; ++v) {
      fwd.push_back(1e-3 * (1 + 0.1 * v));
      bwd.push_back(2 * fwd.back());
    }
    parallel::CheckOptions o;
    o.send_slots = 1 << 20;
    double F = 0, B = 0;
    for (int v = 0; v < pp * chunks; ++v) F += fwd[size_t(v)], B += bwd[size_t(v)];
    o.costs.forward = F / pp;
    o.costs.backward = B / pp;
    // The checker scales by fwd + bwd; bwd = 2·fwd on every stage, so its
    // forward and backward times are fwd[v] and bwd[v] exactly.
    for (int v = 0; v < pp * chunks; ++v) o.costs.stage_weight.push_back(fwd[size_t(v)] + bwd[size_t(v)]);
    const parallel::ScheduleReport want = parallel::check_schedule(s, o);
    const plan::PipelineSimResult got = plan::simulate_pipeline(c, s, fwd, bwd, 0);
    EXPECT_NEAR(got.makespan, want.makespan, 1e-9 * want.makespan) << name;
    EXPECT_NEAR(got.bubble, want.bubble, 1e-9) << name;
    // Real activations over the links only lengthen it.
    const plan::PipelineSimResult slow = plan::simulate_pipeline(c, s, fwd, bwd, 64 << 20);
    EXPECT_GT(slow.makespan, got.makespan) << name;
    EXPECT_GT(slow.transfer_s, 0) << name;
  }
  const parallel::Schedule s = parallel::make_schedule("1f1b", 4, 8, 1);
  EXPECT_THROW(plan::simulate_pipeline(c, s, {1, 1}, {1, 1}, 0), Error);
}

}  // namespace
