// PipelineExecutor: runs a checked Schedule (schedule.h, schedule_check.h)
// on this rank's stages of a model, with one activation slot per live
// micro-batch; and pipeline_bubble, the bubble measured from the ranks'
// step spans.
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
#include "braid/schedule.h"
#include "braid/schedule_check.h"
#include "braid/tensor.h"
#include "braid/trainer.h"

namespace braid {
class Communicator;
}

namespace braid::parallel {

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

}  // namespace braid::parallel
