// ParallelTrainer: nn::Trainer's step loop over a ParallelModel. The
// schedule is the loop's forward/backward stage (PipelineTrainer); what
// makes it parallel lives in its hooks: DataParallel over the dp group (its buckets reduced
// as the last backward makes them final, ZeRO-1's sharded update and
// gathers), the sequence-parallel gradient sums over tp, and a clipping
// norm that counts every element of the model once whichever ranks hold
// it. The loss is the spec's (the GPT's vocabulary-parallel). At
// tp = pp = 1 there is no schedule: nn::Trainer's loop with the model's
// DataParallel attached, every ZeRO stage.
#include "braid/env.h"
#include "braid/error.h"
#include "braid/kernels.h"
#include "parallel/model/impl.h"

namespace braid::parallel {

// PipelineHooks over the model's DataParallel, timing the communication
// that the step record reports as comm_s.
class ParallelTrainer::Hooks : public PipelineHooks {
 public:
  Hooks(ParallelModel::Impl& m, const Mesh& mesh)
      : PipelineHooks(*m.exec, *m.dp), m_(m), mesh_(mesh) {}

  void begin_step(int64_t step, const std::vector<nn::Parameter*>& params) override {
    comm_s = 0;
    PipelineHooks::begin_step(step, params);
  }

  void before_optimizer_step(const std::vector<nn::Parameter*>& params) override {
    // The dp sums (buckets the last backward did not finish, then waiting
    // for all) before the tp sums of sequence parallelism's partial
    // gradients: both are sums, so their order does not matter, but the
    // tp all_reduce must not read a bucket still being reduced.
    ActionTiming& t = exec_.loop_timing(ActionKind::kReduceGrads);
    t.start = now_s();
    m_.dp->before_optimizer_step(params);
    tp::reduce_partial_grads(m_.model->shards(), *mesh_.tp(), m_.partial);
    t.end = now_s();
    comm_s += t.end - t.start;
  }

  void optimizer_step(nn::Optimizer& opt, const std::vector<nn::Parameter*>& params,
                      float lr) override {
    // Every dp rank holds the full summed gradients (ZeRO 0 and 1
    // all_reduce them), so the clipping before is unchanged; the update is
    // DataParallel's: all parameters, or under ZeRO-1 this rank's chunk of
    // each bucket and then an all_gather, which ends here so that the
    // parameters are current between steps.
    PipelineHooks::optimizer_step(opt, params, lr);
    const double t0 = now_s();
    m_.dp->gather_all_params();
    comm_s += now_s() - t0;
  }

  void after_step(nn::StepState& st) override {
    const double t0 = now_s();
    PipelineHooks::after_step(st);
    comm_s += now_s() - t0;
  }

  double comm_s = 0;  // this step's

 protected:
  std::vector<nn::GradPiece> norm_pieces(const std::vector<nn::Parameter*>&) override {
    // A shard is counted on its rank; a replicated parameter (the same on
    // every tp rank once reduced) on tp rank 0 only. Stages hold disjoint
    // parameters, so the pp sum counts each once.
    // Under expert parallelism each rank of an ep group holds its own
    // experts (counted on tp rank 0: they are replicated over tp) and the
    // same everything else (counted on ep rank 0); the ep sum adds them.
    const bool ep0 = m_.experts.ep == 1 || m_.experts.ep_comm->rank() == 0;
    std::vector<nn::GradPiece> pieces;
    for (const tp::Sharded& sh : m_.model->shards()) {
      const bool counted = sh.expert ? mesh_.coord().tp == 0
                                     : (sh.spec.dim >= 0 || mesh_.coord().tp == 0) && ep0;
      pieces.push_back({sh.param->grad.f32(), sh.param->size(), counted});
    }
    return pieces;
  }

  void sum_over_ranks(double& sq) override {
    const double t0 = now_s();
    mesh_.tp()->all_reduce(&sq, &sq, 1, DType::kF64, ReduceOp::kSum);
    mesh_.pp()->all_reduce(&sq, &sq, 1, DType::kF64, ReduceOp::kSum);
    if (m_.experts.ep > 1) m_.experts.ep_comm->all_reduce(&sq, &sq, 1, DType::kF64, ReduceOp::kSum);
    comm_s += now_s() - t0;
  }

 private:
  ParallelModel::Impl& m_;
  const Mesh& mesh_;
};

namespace {

// The serial run's options at this rank's place among the pipeline copies.
nn::TrainOptions placed(nn::TrainOptions o, const Mesh& mesh, int micro_batches) {
  const int dp = mesh.dp_size();
  BRAID_CHECK_ARG(o.accum >= 1,
                  "parallel trainer: accum " + std::to_string(o.accum) + " (at least 1)");
  BRAID_CHECK_ARG(
      o.global_batch > 0 && o.global_batch % (int64_t(dp) * micro_batches * o.accum) == 0,
      "parallel trainer: global batch " + std::to_string(o.global_batch) +
          " does not split into dp=" + std::to_string(dp) + " copies of " +
          std::to_string(o.accum) + " accumulation rounds of " + std::to_string(micro_batches) +
          " micro-batches");
  o.rank = mesh.coord().dp;
  o.world = dp;
  return o;
}

}  // namespace

ParallelTrainer::ParallelTrainer(ParallelModel& model, nn::Dataset& data, nn::Optimizer& opt,
                                 nn::LrSchedule schedule, nn::TrainOptions opts)
    : model_(model), opt_(opt) {
  ParallelModel::Impl& m = *model.impl_;
  nn::TrainOptions o = placed(opts, model.mesh(), m.opts.micro_batches);
  loss_ = m.spec->make_loss(model.mesh().tp());
  if (m.pipelined) {
    hooks_ = std::make_unique<Hooks>(m, model.mesh());
    trainer_ = std::make_unique<PipelineTrainer>(*m.exec, *m.model, data, opt, schedule, o);
    trainer_->set_hooks(*hooks_);
  } else {
    // No pipeline: nn::Trainer's own loop with DataParallel as its hooks;
    // the micro-batches are accumulation rounds (the same sums).
    o.accum *= m.opts.micro_batches;
    trainer_ = std::make_unique<nn::Trainer>(*m.model, data, opt, schedule, o);
    m.dp->attach(*trainer_);
  }
  trainer_->set_loss(*loss_);
}

ParallelTrainer::~ParallelTrainer() = default;

int64_t ParallelTrainer::next_step() const { return trainer_->next_step(); }

nn::StepStats ParallelTrainer::step() {
  ParallelModel::Impl& m = *model_.impl_;
  const double t0 = now_s();
  const nn::StepStats st = trainer_->step();
  record_ = {};
  record_.step = st.step;
  record_.loss = st.loss;
  record_.grad_norm = st.grad_norm;
  record_.step_s = now_s() - t0;
  if (!m.pipelined) {
    const DpStepTimes& t = m.dp->rank_times()[size_t(m.dp->rank())];
    record_.compute_s = t.compute_s;
    record_.comm_s = t.exposed_comm_s;
    return st;
  }
  PipelineExecutor& exec = *m.exec;
  record_.peak_activation_bytes = exec.peak_held_bytes();
  const auto& list = exec.schedule().actions[size_t(model_.mesh().coord().pp)];
  const auto& times = exec.timings();
  for (size_t i = 0; i < list.size(); ++i) {
    const double d = times[i].end - times[i].start;
    switch (list[i].kind) {
      case ActionKind::kForward:
      case ActionKind::kBackward:
      case ActionKind::kStep:
        record_.compute_s += d;
        break;
      case ActionKind::kComm:
        record_.bubble_s += d;
        break;
      case ActionKind::kReduceGrads:
        break;  // all of it is in the hooks' comm_s
    }
  }
  record_.comm_s = hooks_->comm_s;
  return st;
}

void ParallelTrainer::save(const std::string& path) {
  model_.save(path, opt_, trainer_->next_step(), trainer_->options().seed, trainer_->run_meta());
}

void ParallelTrainer::load(const std::string& path) {
  std::map<std::string, std::string> meta;
  trainer_->set_next_step(model_.load(path, opt_, trainer_->options().seed, &meta));
  trainer_->restore_meta(meta);
}

}  // namespace braid::parallel
