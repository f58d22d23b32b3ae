// Pipeline schedules as data (parallel::Schedule): each rank's ordered list
// of Actions for one step, and the generators of GPipe, 1F1B and
// interleaved 1F1B. The checker that proves a schedule before it runs is
// schedule_check.h; the executor that runs it, pipeline_executor.h.
//
// The model (an nn::Sequential) is cut into S = ranks × chunks contiguous
// ranges of its top-level modules, the virtual stages (partition.h).
// Virtual stage s lives on rank s % ranks as that rank's chunk s / ranks
// (chunks > 1 is the interleaved schedule; chunks == 1 gives one stage per
// rank). The global batch is split along dim 0 into M micro-batches;
// activations flow from stage s to s + 1 and their gradients back, over
// the communicator's tagged send / recv.
//
// An Action is forward or backward of one (micro-batch, chunk), a
// communication action (a set of transfers posted together that completes
// when all of them have), reduce gradients or the optimizer step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace braid::parallel {

enum class Payload : uint8_t { kActivation, kGradient };

// One message of a communication action. `stage` is the virtual stage that
// produced it: an activation goes from stage to stage + 1, a gradient from
// stage to stage − 1.
struct Transfer {
  bool send = false;
  Payload what = Payload::kActivation;
  int mb = 0;
  int stage = 0;
  int peer = 0;
};

enum class ActionKind : uint8_t { kForward, kBackward, kComm, kReduceGrads, kStep };

struct Action {
  ActionKind kind = ActionKind::kForward;
  int mb = -1;     // kForward, kBackward: the micro-batch
  int chunk = -1;  // kForward, kBackward: which of this rank's chunks
  std::vector<Transfer> transfers;  // kComm: posted together
};

struct Schedule {
  std::string name;
  int ranks = 0;
  int chunks = 1;  // virtual stages per rank
  int micro_batches = 0;
  std::vector<std::vector<Action>> actions;  // [rank]

  int stages() const { return ranks * chunks; }
  int stage_of(int rank, int chunk) const { return chunk * ranks + rank; }
  int rank_of(int stage) const { return stage % ranks; }
  int chunk_of(int stage) const { return stage / ranks; }
};

// "F m3", "B m3 c1", "send act m3 s0->s1 to rank 1 + recv grad m0 s1->s0
// from rank 1", "reduce grads", "optimizer step".
std::string action_text(const Schedule& s, const Action& a);
// The tag a transfer travels with: distinct for every (payload, micro-
// batch, stage), below 2^30 (the executor keeps the tags above for itself).
// Throws Error(kInvalidArgument) when M × stages needs more.
uint32_t transfer_tag(const Schedule& s, const Transfer& t);

// Each rank's order of compute steps; lower_schedule inserts the transfers
// and ends every list with reduce grads and the step. Between two blocks of
// compute (a step with `with_next` set and the step after it form one
// block) comes one communication action: the block's sends, posted
// together with the receives the next block needs, taken in the order the
// peer sends them.
struct ComputeStep {
  bool forward = true;
  int mb = 0;
  int chunk = 0;
  bool with_next = false;  // no communication between this step and the next
};
Schedule lower_schedule(std::string name, int ranks, int chunks, int micro_batches,
                        const std::vector<std::vector<ComputeStep>>& order);

// All forwards, then all backwards (newest micro-batch first).
Schedule gpipe_schedule(int ranks, int micro_batches);
// One forward, one backward: rank r runs ranks − r − 1 warm-up forwards,
// then alternates, so at most min(ranks − r, M) activations are live.
Schedule one_f_one_b_schedule(int ranks, int micro_batches);
// Megatron-LM's interleaved 1F1B over `chunks` virtual stages per rank;
// micro_batches must be a multiple of ranks.
Schedule interleaved_schedule(int ranks, int micro_batches, int chunks);
// By name: "gpipe", "1f1b", "interleaved" (chunks ≥ 2 for the last; 1 for
// the others). Throws Error(kInvalidArgument) naming the valid names.
Schedule make_schedule(const std::string& name, int ranks, int micro_batches, int chunks = 1);

// One line per rank: its action texts, separated by " | ".
std::string format_actions(const Schedule& s);

// Start and end of one action when it ran (the executor records them).
struct ActionTiming {
  double start = 0, end = 0;  // seconds on the monotonic clock
};

}  // namespace braid::parallel
