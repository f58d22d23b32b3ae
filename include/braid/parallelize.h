// parallel::parallelize — any model (a ModelSpec: model_spec.h) laid out
// over a dp × tp × pp mesh: tensor parallel inside a pipeline stage,
// pipeline parallel across stages, data parallel across copies of the
// whole pipeline; and ParallelTrainer, the one trainer of every layout.
//
// Layout (mesh.h): the rank at (d, s, t) holds stage s of pipeline copy d,
// tensor-parallel rank t of it. The spec's units are cut into pp · chunks
// contiguous virtual stages (partition_layers over ParallelOptions::
// unit_costs); each rank builds only its stages' units, split over its tp
// group (ShardedModel), parameters equal to the serial model's slices.
// Activations and their gradients travel between tp rank t of stage s and
// tp rank t of stage s ± 1 over the mesh's pp group; the last stage runs
// the spec's loss (the GPT's is vocabulary-parallel).
//
// One step (ParallelTrainer::step(): nn::Trainer's step loop with the
// schedule as its forward/backward stage, PipelineTrainer): each pipeline
// copy d takes rows [d·B/dp, (d+1)·B/dp) of the global batch (its shard as
// data-parallel rank d of dp) and runs the schedule (PipelineExecutor)
// over its micro-batches. Gradients are SUMMED over dp by a DataParallel
// over the mesh's dp group (data_parallel.h; each is its replica's share
// of the global mean, so the sum is the mean): the executor's last
// backward of each chunk sets its grad-ready hook, so a bucket's
// all_reduce starts as soon as that backward has made its gradients final;
// the loop's before_optimizer_step (the schedule's reduce-gradients action)
// waits for them all, then under sequence parallelism sums the partial
// gradients over tp. No weight is shared between stages (the GPT ties
// none). Clipping uses the global norm over every element once, from each
// parameter's split (a shard counts on its rank, a replicated parameter on
// tp rank 0; all_reduce over tp, then over pp); then DataParallel's update
// of this rank's shards (under ZeRO-1 of its chunk of each bucket, then an
// all_gather over dp that the step waits for before it returns). Equal,
// within rounding, to nn::Trainer on the spec's serial model with the same
// seed, global batches and optimizer.
//
// Collective: parallelize, ParallelTrainer's constructor, step(), save()
// and load() must be called by every rank of the mesh's world at the same
// point.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "braid/data_parallel.h"
#include "braid/expert_parallel.h"
#include "braid/mesh.h"
#include "braid/model_spec.h"
#include "braid/optim.h"
#include "braid/partition.h"
#include "braid/pipeline_trainer.h"
#include "braid/sharded_model.h"
#include "braid/trainer.h"

namespace braid::parallel {

struct ParallelOptions {
  std::string schedule = "1f1b";  // "gpipe", "1f1b" or "interleaved"
  int micro_batches = 1;          // per pipeline copy per step
  int chunks = 1;                 // virtual stages per pp rank (interleaved: ≥ 2)
  bool sequence_parallel = false;
  // Data parallelism over the mesh's dp group: the ZeRO stage (any with
  // tp = pp = 1; 0 or 1 beside tp or pp), buckets, overlap, bf16 gradients.
  DpOptions dp;
  // Expert parallelism for a spec with experts (ModelSpec::experts() > 0;
  // expert_parallel.h): each MoE layer's experts split over groups of `ep`
  // consecutive dp ranks, expert gradients summed over the dp/ep replicas
  // of each expert, the rest data parallel over dp as always. ep must
  // divide dp and the experts, and needs ZeRO 0; ep > 1 for a model
  // without experts is refused.
  int ep = 1;
  // Cost of each of the spec's units for cutting the stages (unit_count()
  // entries); empty: ModelSpec::unit_costs(), each unit's multiply-adds.
  std::vector<double> unit_costs;
  // Not empty: every parameter starts as this rank's slice of the file's
  // "model/<name>" tensor (full shapes, as a checkpoint or --save-init
  // writes them), loaded before data parallelism shares it out; optimizer
  // state and step are not read. Errors: checkpoint.h's (kIo, kCorrupt
  // naming the missing tensor).
  std::string init_from;
};

// One rank's record of its last step. The split of step_s:
//   compute_s   forward, backward and the optimizer update (the tensor-
//               parallel collectives inside the layers count here);
//   comm_s      waiting for the dp gradient reductions after the last
//               backward (a reduction that runs inline inside that backward,
//               where no core is spare for overlap, counts in compute_s), the
//               tp sums (sequence parallel), the clipping norm's
//               all_reduces, waiting for ZeRO-1's all_gather, the loss sums;
//   bubble_s    the schedule's communication actions: waiting for the
//               neighbouring stages plus the activation transfers;
//   the remainder is bookkeeping (reading the batch, the shape exchange).
struct ParallelStepRecord {
  int64_t step = 0;
  double loss = 0;       // mean over the global batch
  double grad_norm = 0;  // before clipping (0 unless clipping)
  double step_s = 0, compute_s = 0, comm_s = 0, bubble_s = 0;
  int64_t peak_activation_bytes = 0;  // PipelineExecutor::peak_held_bytes; 0 unless pipelined
};

class ParallelModel {
 public:
  // parallelize() builds one.
  ParallelModel(std::shared_ptr<const ModelSpec> spec, const Mesh& mesh, ParallelOptions opts);
  ~ParallelModel();
  ParallelModel(const ParallelModel&) = delete;
  ParallelModel& operator=(const ParallelModel&) = delete;

  // Whether the model runs through a pipeline executor: tp or pp above 1.
  // At tp = pp = 1 it is the spec's whole model under DataParallel and
  // nn::Trainer's own loop (every ZeRO stage; micro-batches become
  // accumulation rounds), and the four pipeline calls below throw
  // Error(kInvalidArgument).
  bool pipelined() const;
  // Start and end of each of this rank's schedule actions in the last step
  // (for write_pipeline_trace over the mesh's pp group).
  const std::vector<ActionTiming>& timings() const;
  // This rank's pipeline executor (its step span and waits: the bubble).
  const PipelineExecutor& executor() const;

  const Mesh& mesh() const { return mesh_; }
  const ModelSpec& spec() const;
  const ParallelOptions& options() const;
  const Schedule& schedule() const;
  // The virtual stages as unit bounds (at tp = pp = 1: {0, unit_count()}) (partition_layers over
  // ParallelOptions::unit_costs): stage v holds units [b[v], b[v + 1]).
  const std::vector<size_t>& stage_bounds() const;
  // This rank's parameters (its stages' shards) with their splits.
  const std::vector<tp::Sharded>& shards() const;
  std::vector<nn::Parameter*> parameters() const;
  // Bytes of parameters this rank holds between steps (under ZeRO-3 its
  // shard).
  int64_t parameter_bytes() const;
  // The data parallelism over the mesh's dp group that owns this rank's
  // gradient buckets: its memory, its time split, and (ZeRO-3)
  // gather_all_params() for reading every parameter whole between steps.
  DataParallel& data_parallel() const;
  // The expert-parallel groups (ep = 1 and null communicators unless
  // ParallelOptions::ep > 1).
  const ExpertGroups& expert_groups() const;
  // Bytes of optimizer state this rank holds (what the optimizer has
  // allocated: 0 before its first step).
  int64_t optimizer_bytes(const nn::Optimizer& opt) const;

  // Checkpoints in the serial format (checkpoint.h): "model/<name>" and
  // "optim/<name>/<slot>" at the serial model's full shapes, meta "step"
  // (`step`: the next step to run), "seed" (`seed`: the run's
  // TrainOptions::seed, which nn::Trainer checks on resume), "optim/kind",
  // "optim/steps" — what nn::Trainer writes, so a run saved at any
  // (dp, tp, pp) resumes at any other or in one process. save gathers
  // (optimizer state over dp, then everything over tp, then to world rank
  // 0, which writes `path`); load reads it on every rank, checks its seed
  // is `seed`, keeps this rank's slices and returns the step to resume at.
  // Errors: checkpoint.h's (kIo, kCorrupt naming the missing tensor).
  // ParallelTrainer::save / load call these with its own step and seed,
  // and the rest of its loop's meta (`extra`, nn::Trainer::run_meta: the
  // loss scaler's state), which load hands back in `meta`.
  void save(const std::string& path, const nn::Optimizer& opt, int64_t step, uint64_t seed,
            const std::map<std::string, std::string>& extra = {});
  int64_t load(const std::string& path, nn::Optimizer& opt, uint64_t seed,
               std::map<std::string, std::string>* meta = nullptr);

 private:
  friend class ParallelTrainer;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  Mesh mesh_;
};

// Trains a ParallelModel with nn::Trainer's one step loop: PipelineTrainer
// runs the schedule as its forward/backward stage over this pipeline
// copy's shard of each global batch, with the spec's loss and the
// layout's step hooks (DataParallel over dp, the sequence-parallel tp
// sums, the clipping norm over tp and pp, ZeRO-1's gathers). `opts` are
// the serial run's: the global batch (it must split into dp · accum ·
// micro_batches), accum (rounds of the whole schedule per step, each over
// 1/accum of the shard), seed and clip (by the global norm over every
// element once: all_reduce over tp, then over pp); rank and world are set
// from the mesh's dp coordinate. Throws Error(kInvalidArgument) naming
// what does not split. Every step's StepStats equal nn::Trainer's on
// the spec's serial model with the same data, optimizer, schedule and
// options, within rounding. Collective, as parallelize.
class ParallelTrainer {
 public:
  ParallelTrainer(ParallelModel& model, nn::Dataset& data, nn::Optimizer& opt,
                  nn::LrSchedule schedule, nn::TrainOptions opts);
  ~ParallelTrainer();
  ParallelTrainer(const ParallelTrainer&) = delete;
  ParallelTrainer& operator=(const ParallelTrainer&) = delete;

  nn::StepStats step();
  const ParallelStepRecord& last() const { return record_; }
  int64_t next_step() const;
  // ParallelModel::save / load with the trainer's step.
  void save(const std::string& path);
  void load(const std::string& path);

 private:
  class Hooks;
  ParallelModel& model_;
  nn::Optimizer& opt_;
  // Declared before trainer_, which holds them by reference.
  std::unique_ptr<Hooks> hooks_;  // null unless pipelined
  std::unique_ptr<nn::Loss> loss_;
  std::unique_ptr<nn::Trainer> trainer_;  // a PipelineTrainer when pipelined
  ParallelStepRecord record_;
};

// --pp-balance: the cost of each of the spec's units (unit_count()
// entries, seconds) for ParallelOptions::unit_costs: its forward plus
// backward (the last unit's with the spec's loss) on a micro-batch of
// `rows` samples (ModelSpec::sample_input), the fastest of `reps` runs
// after one warm-up. World rank 0's tp group times the units one at a
// time, each built alone without initialisation (memory: one unit's
// parameters and activations), and broadcasts the costs, so every rank of
// the mesh gets the same numbers and cuts the same stages. Collective over
// the mesh's world; costs (reps + 1) forward-backward passes of the whole
// model on those ranks. Throws Error(kInvalidArgument) for rows or reps
// below 1, and the spec's errors for sizes that do not split over tp.
std::vector<double> measure_unit_costs(const Mesh& mesh, std::shared_ptr<const ModelSpec> spec,
                                       int64_t rows, bool sequence_parallel, int reps = 3);

// The model of `spec` over `mesh` with `opts`' schedule, micro-batches,
// chunks ("interleaved" with chunks left at 1 runs 2), sequence
// parallelism, ZeRO stage and unit costs. Throws Error(kInvalidArgument)
// for a bad schedule name, chunks, ZeRO stage (2 and 3 need tp = pp = 1)
// or unit_costs,
// sizes that do not split over tp (the spec's messages), or fewer units
// than virtual stages (naming the spec's units).
std::unique_ptr<ParallelModel> parallelize(std::shared_ptr<const ModelSpec> spec, const Mesh& mesh,
                                           ParallelOptions opts = {});

}  // namespace braid::parallel
