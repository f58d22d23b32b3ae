// Pipeline parallelism: schedules as data, a checker that proves them
// before they run, a text timeline, an executor and a Chrome-trace writer.
//
// The model (an nn::Sequential) is cut into S = ranks × chunks contiguous
// ranges of its top-level modules, the virtual stages. Virtual stage s
// lives on rank s % ranks as that rank's chunk s / ranks (chunks > 1 is
// the interleaved schedule; chunks == 1 gives one stage per rank). The
// global batch is split along dim 0 into M micro-batches; activations flow
// from stage s to s + 1 and their gradients back, over the communicator's
// tagged send / recv.
//
// A Schedule is each rank's ordered list of Actions: forward or backward
// of one (micro-batch, chunk), a communication action (a set of transfers
// posted together that completes when all of them have), reduce gradients
// and the optimizer step. Generators build GPipe, 1F1B and interleaved
// 1F1B; check_schedule plays the ranks' lists against each other before a
// schedule may run.
//
// Blocking model of the checker. braid's send completes once its bytes sit
// in the peer's receive ring (four slots over shared memory) or socket
// buffer, so small messages are buffered and large ones (an activation of
// any real size) wait for their receive. The checker therefore assumes, by
// default, that a send blocks until its receive is posted (rendezvous,
// CheckOptions::send_slots = 0): a schedule that passes under rendezvous
// passes under any buffering, since buffering only lets a send finish
// sooner. Messages between two ranks are matched in posting order and
// their tags must agree, as braid's are.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "braid/loss.h"
#include "braid/module.h"
#include "braid/optim.h"
#include "braid/tensor.h"
#include "braid/trainer.h"

namespace braid {
class Communicator;
}

namespace braid::parallel {

// ---- Schedules as data ----------------------------------------------------

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

// ---- The checker ----------------------------------------------------------

// Cost of one micro-batch through ALL of a rank's layers; a chunk's action
// costs 1/chunks of it, so schedules with different chunks compare fairly.
struct ScheduleCosts {
  double forward = 1.0;
  double backward = 2.0;
  double transfer = 0.0;  // per communication action
  // [virtual stage] each stage's share of the model's cost, relative (e.g.
  // the summed module costs partition_layers cut it by): a compute action
  // of stage v costs forward (or backward) / chunks × weight[v] / mean
  // weight. Empty: every stage weighs the same.
  std::vector<double> stage_weight;
};

struct CheckOptions {
  ScheduleCosts costs;
  // Messages a channel holds before a send waits for its receive (0:
  // rendezvous, the default; see the top of this file).
  int send_slots = 0;
};

struct ActionTime {
  double start = 0, end = 0;
};

struct ScheduleReport {
  double makespan = 0;
  // 1 − Σ busy / (ranks × makespan): the fraction of rank-time idle.
  double bubble = 0;
  std::vector<double> busy;                // [rank] compute time
  std::vector<int> peak_live;              // [rank] most (micro-batch, chunk)
                                           // forwards awaiting their backward
  std::vector<std::vector<ActionTime>> times;  // [rank][action]
};

// Proves `s`: every action well formed; on each rank every owned (micro-
// batch, chunk) has one forward and, after it, one backward; each compute's
// input was received before it and each send follows the compute that made
// it; every send has its receive with the same tag in posting order; and
// playing all lists together under the blocking model reaches every end
// (no deadlock). Returns the simulated timing. Throws
// Error(kInvalidArgument) "schedule 'NAME' rejected: rank R, action I (TEXT):
// why" — for a deadlock, every blocked rank with its action and what it
// waits for. Cost: O(total actions × ranks).
ScheduleReport check_schedule(const Schedule& s, const CheckOptions& opt = {});

// ---- Printing -------------------------------------------------------------

// One line per rank: its action texts, separated by " | ".
std::string format_actions(const Schedule& s);
// One row per rank over simulated time (a column per forward-chunk cost):
// "F3", "B3" (with a chunk letter a, b, … when chunks > 1), "." idle; then
// the bubble fraction and each rank's peak live activations.
std::string format_timeline(const Schedule& s, const ScheduleReport& r);

// ---- Stages ---------------------------------------------------------------

// Cuts layers with these costs into `stages` contiguous non-empty ranges
// with the smallest largest sum (equal costs: a split by count; measured
// per-layer times: a balanced split). Returns stages + 1 bounds, from 0 to
// cost.size(). Throws Error(kInvalidArgument) when stages < 1 or exceeds
// the layers, or a cost is negative.
std::vector<size_t> partition_layers(const std::vector<double>& cost, int stages);
// One line per stage of `bounds` (partition_layers'), with costs in
// seconds: "stage 1: layers [3, 5), predicted 2.500 ms". Throws
// Error(kInvalidArgument) when bounds do not cut the costs' layers.
std::string format_partition(const std::vector<double>& cost, const std::vector<size_t>& bounds);

// ---- The executor ---------------------------------------------------------

struct ActionTiming {
  double start = 0, end = 0;  // seconds on the monotonic clock
};

struct PipelineOptions {
  // Called after each action of a step with its index (progress, tests).
  std::function<void(int action)> after_action;
  // Micro-batches whose activations a chunk keeps at once (its activation
  // slots; see the executor). 0: as many as the schedule keeps live on
  // that chunk, so no forward runs twice. Fewer (at least 1) is activation
  // recomputation: memory for the activations of that many micro-batches,
  // paid for by running again the forward of a micro-batch whose
  // activations were given up before its backward.
  int activation_slots = 0;
};

// What the step loop (nn::Trainer, through PipelineTrainer) hands the
// schedule for one step.
struct PipelineStep {
  int64_t step = 0;       // dropout keys: (seed, step, global row)
  uint64_t seed = 0;
  // Which run of the schedule within the step (gradient accumulation runs
  // it once per accumulation round, each over its share of the batch): 0
  // starts the step's accounting (step_span, step_busy_s, the peaks),
  // later rounds add to it.
  int round = 0;
  int64_t first_row = 0;  // the global batch row of the input's row 0
  // dL/dlogits scale: 1 / (global batch · targets per sample), so that the
  // SUM of the pipeline copies' gradients is the global mean's.
  float scale = 0;
  nn::Loss* loss = nullptr;  // the last stage's; its forward returns a sum
  // Set as nn::Context::grad_ready on each chunk's last backward of the
  // run (give it on the step's last round only), so it is called once per
  // parameter of this rank (the model's,
  // never a slot copy's) as soon as its gradient for the step is final:
  // where data parallelism starts reducing buckets while the rest of that
  // backward runs. Empty: none.
  nn::GradReadyHook grad_ready;
};

// Another copy of this rank's chunks of the model, for the executor's
// activation slots: chunks[c] is chunk c's modules in forward order;
// `owner` keeps them alive as long as the executor needs them.
struct ChunkCopy {
  std::vector<std::vector<nn::Module*>> chunks;
  std::shared_ptr<void> owner;
};
// Builds a ChunkCopy: the same module types, parameter names and shapes as
// the chunks given to the executor (parameter values do not matter: the
// executor points a copy's parameters at the original's).
using ChunkFactory = std::function<ChunkCopy()>;
// Builds another whole model like the one given to the executor.
using ModelFactory = std::function<std::unique_ptr<nn::Sequential>()>;

// Runs `schedule` on this rank's stages of `model`. Every rank builds the
// same full model (same seed) and keeps only its chunks' modules busy;
// bounds are the schedule's stages() + 1 module boundaries (see
// partition_layers). Or (second constructor) each rank builds only its
// stages' modules. The executor is the forward/backward stage of
// nn::Trainer's step loop (PipelineTrainer below): it runs each rank's
// list up to the schedule's reduce-gradients and optimizer-step actions,
// which are the loop's own stages (the hooks' before_optimizer_step and
// optimizer_step), so zeroing, reduction, clipping, the update, the lr
// schedule and the step's statistics are the loop's, as in one process.
//
// Activation slots. A module holds the activations of the last batch it
// ran forward, so a chunk keeps, besides the model's own modules, copies
// of them built by `copy`: slot k runs copy k. Every copy's parameters are
// views of the model's data and gradients (one set of weights and
// gradients; parameters() and the optimizer see the model's). A forward
// of micro-batch m takes a free slot and m's backward frees it, so a
// chunk needs as many slots as the schedule keeps micro-batches live on
// it (check_schedule's peak_live per rank: ≤ ranks for 1F1B, M for
// GPipe), or PipelineOptions::activation_slots where that is smaller
// (recomputation). Memory: that many micro-batches' activations per
// chunk; the copies' own parameters are freed.
class PipelineExecutor {
 public:
  // Checks the schedule first (check_schedule) and throws its error; also
  // Error(kInvalidArgument) when the communicator's size is not
  // schedule.ranks, the bounds do not fit the model, a copy's parameters
  // differ from the model's (naming the first that does), or copies are
  // needed (more than one slot) and `copy` is empty. Calls `copy` once per
  // slot beyond the first.
  PipelineExecutor(std::shared_ptr<Communicator> comm, nn::Sequential& model, ModelFactory copy,
                   std::vector<size_t> bounds, Schedule schedule, PipelineOptions opts = {});
  // The same over modules this rank built for its own stages only:
  // chunks[c] is its chunk c's modules in forward order (the stage
  // schedule.stage_of(rank, c)). Error(kInvalidArgument) when the chunk
  // count is not schedule.chunks (the model's or a copy's) or a chunk is
  // empty.
  PipelineExecutor(std::shared_ptr<Communicator> comm,
                   std::vector<std::vector<nn::Module*>> chunks, ChunkFactory copy,
                   Schedule schedule, PipelineOptions opts = {});

  // The forward and backward of one step over this pipeline copy's batch:
  // input [B, …] (needed on the rank of stage 0; f32 or i32 tokens),
  // target i32 [B] or [B, T] (needed on the rank of the last stage);
  // others may pass empty tensors. B must split into micro_batches. Runs
  // this rank's actions before the schedule's reduce-gradients action,
  // accumulating into the gradients (the caller zeroes them) and, on the
  // last stage's rank, adding [loss sum, target rows, correct] to sums
  // (nn::StepState::sums; other ranks add nothing). Costs, besides the
  // actions, a broadcast of the micro-batch shape per step and, when that
  // shape changes, one dry forward per stage to learn the activation
  // shapes. Throws the communicator's errors (a dead stage is named in
  // them).
  void run(const Tensor& input, const Tensor& target, const PipelineStep& ps, double sums[3]);

  const std::vector<nn::Parameter*>& parameters() const { return params_; }
  const Schedule& schedule() const { return sched_; }
  const ScheduleReport& report() const { return report_; }
  // Start and end of each of this rank's actions in the last run.
  const std::vector<ActionTiming>& timings() const { return timings_; }
  // Over the step's runs (PipelineStep::round 0 up to the last): from the
  // start of this rank's first action to the end of its last, on the
  // monotonic clock, and the part of it spent in communication actions
  // (waiting for a neighbour stage, and the transfers). The bubble of a
  // pipeline is, per rank, those waits plus the time before its span and
  // after it while another rank's span runs (pipeline_bubble).
  ActionTiming step_span() const { return step_span_; }
  double step_comm_s() const { return step_comm_s_; }
  // Forwards run again for a backward in the last step: 0 unless
  // PipelineOptions::activation_slots is below what the schedule keeps live.
  int recomputed() const { return recomputed_; }
  // Activation slots of each chunk of this rank (see above).
  std::vector<int> slots() const;
  // Accounting of the last step, sampled between actions:
  // peak_live: the most micro-batches whose activations this rank's slots
  // held at once (check_schedule's peak_live for the rank unless
  // recomputing). peak_activation_bytes: the most bytes those slots held at
  // once, counted as the outputs of the chunk's modules for each held
  // micro-batch (modules' internal caches, e.g. attention probabilities,
  // come on top in the same proportion). peak_held_bytes: the most bytes of
  // the slots plus the executor's own buffers at once — stage inputs
  // awaiting their backward (stage 0's are views of the caller's batch and
  // not counted), gradients awaiting their send, incoming gradients,
  // and outputs awaiting their send that recomputation evicted from their
  // slot (the others are sent straight from the slot, counted above).
  int peak_live() const { return peak_live_; }
  int64_t peak_activation_bytes() const { return peak_activation_; }
  int64_t peak_held_bytes() const { return peak_held_; }
  Communicator& comm() { return *comm_; }
  // The timing of this rank's reduce-gradients or optimizer-step action
  // (`kind`), which run() leaves to the step loop: PipelineHooks sets it.
  ActionTiming& loop_timing(ActionKind kind);

 private:
  struct Stage;
  void learn_shapes(const Shape& mb_shape, DType mb_dtype);
  void forward(int mb, int chunk, bool for_backward);
  void backward(int mb, int chunk);
  void communicate(const Action& a);
  void init(std::vector<std::vector<nn::Module*>> chunks, const ChunkFactory& copy);
  void account();

  std::shared_ptr<Communicator> comm_;
  Schedule sched_;
  ScheduleReport report_;
  PipelineOptions opts_;
  int rank_;
  std::vector<std::shared_ptr<Stage>> stages_;  // [chunk]
  std::vector<std::shared_ptr<void>> copies_;   // owners of the slots' modules
  std::vector<nn::Parameter*> params_;
  std::vector<ActionTiming> timings_;
  Shape mb_shape_;  // and dtype: what the stage shapes were learnt for
  DType mb_dtype_ = DType::kF32;
  // Per step:
  const Tensor* input_ = nullptr;
  const Tensor* target_ = nullptr;
  const PipelineStep* ps_ = nullptr;
  int64_t mb_rows_ = 0;
  double sums_[3] = {0, 0, 0};
  int recomputed_ = 0;
  int64_t peak_held_ = 0, peak_activation_ = 0;
  int peak_live_ = 0;
  ActionTiming step_span_;
  double step_comm_s_ = 0;
};

// The bubble of one step of a pipeline from its ranks' step_span() and
// step_comm_s() (clocks comparable: one host's monotonic clock): with
// span = the latest end − the earliest start, rank r idles for
// step_comm_s[r] + (span − its own span); returns [Σ idle, ranks × span],
// whose ratio is check_schedule's bubble (1 − Σ busy / (ranks ×
// makespan)) measured. One rank: [0, its span]. Error(kInvalidArgument)
// when the two lists' sizes differ or are empty.
std::pair<double, double> pipeline_bubble(const std::vector<ActionTiming>& spans,
                                          const std::vector<double>& comm_s);

// ---- In the step loop ----------------------------------------------------

// The step hooks of a pipeline: `inner`'s (the built-in serial set, or
// DataParallel's over copies of the pipeline) with the two stages that
// span the pipeline's ranks: clip_grad_norm uses the global norm over
// every stage (nn::clip_global_norm over norm_pieces, summed by
// sum_over_ranks, collective over the pipeline's ranks),
// and after_step sums [loss sum, rows, correct] over them (only the last
// stage's rank has any) before `inner`'s after_step.
class PipelineHooks : public nn::StepHooks {
 public:
  // Over `exec`'s ranks; times the schedule's reduce-gradients and
  // optimizer-step actions (exec.loop_timing) around `inner`'s stages.
  PipelineHooks(PipelineExecutor& exec, nn::StepHooks& inner) : exec_(exec), inner_(&inner) {}
  void set_inner(nn::StepHooks& inner) { inner_ = &inner; }

  void begin_step(int64_t step, const std::vector<nn::Parameter*>& params) override;
  nn::GradReadyHook grad_ready_hook() override { return inner_->grad_ready_hook(); }
  void before_optimizer_step(const std::vector<nn::Parameter*>& params) override;
  // Scales gradients by max_norm / (norm + 1e-6) when the norm exceeds
  // max_norm, as nn::clip_grad_norm does in one process.
  double clip_grad_norm(const std::vector<nn::Parameter*>& params, double max_norm) override;
  void optimizer_step(nn::Optimizer& opt, const std::vector<nn::Parameter*>& params,
                      float lr) override;
  void after_step(nn::StepState& st) override;

 protected:
  // What this rank adds to the global norm, and how the ranks' sums meet:
  // here every gradient of this rank's stages, summed over the pipeline's
  // ranks (stages hold disjoint parameters). Collective over those ranks.
  virtual std::vector<nn::GradPiece> norm_pieces(const std::vector<nn::Parameter*>& params);
  virtual void sum_over_ranks(double& square_sum);
  PipelineExecutor& exec_;
  nn::StepHooks* inner_;
};

// nn::Trainer with the executor's schedule as its forward/backward stage:
// each step this rank's shard of the global batch (TrainOptions::rank and
// world: this pipeline copy among the copies) is gathered whole and run
// through `exec` with the trainer's loss, seed and loss scale, and the
// grad-ready hook of the hooks in use. Its parameters are the executor's
// (this rank's stages); its hooks a PipelineHooks over the built-in set
// (hooks()), so TrainOptions::clip clips by the norm over all stages and
// StepStats are the whole pipeline's. `model` is what the executor runs
// this rank's chunks of (the whole model, or this rank's stages);
// TrainOptions::accum rounds each run the whole schedule over 1/accum of
// the shard (which the schedule's micro-batches then split), adding to
// the gradients, as nn::Trainer's accumulation does. save/load are nn::Trainer's over this rank's parameters only.
class PipelineTrainer : public nn::Trainer {
 public:
  PipelineTrainer(PipelineExecutor& exec, nn::Module& model, nn::Dataset& data,
                  nn::Optimizer& opt, nn::LrSchedule schedule, nn::TrainOptions opts);
  PipelineHooks& pipeline_hooks() { return pipe_hooks_; }

 protected:
  void forward_backward(nn::StepState& st) override;

 private:
  PipelineExecutor& exec_;
  PipelineHooks pipe_hooks_;
};

// ---- Traces ---------------------------------------------------------------

// Chrome trace JSON ("traceEvents", one complete event per compute or
// communication action, tid = rank, times in µs from the earliest start).
std::string chrome_trace_json(const Schedule& s,
                              const std::vector<std::vector<ActionTiming>>& per_rank);
// Collective over comm: gathers every rank's timings of its last step to
// rank 0, which writes chrome_trace_json to `path` (Error(kIo) if it
// cannot). The ranks' clocks are one clock on one host; across hosts their
// offsets are not corrected.
void write_pipeline_trace(Communicator& comm, const Schedule& s,
                          const std::vector<ActionTiming>& mine, const std::string& path);

}  // namespace braid::parallel
