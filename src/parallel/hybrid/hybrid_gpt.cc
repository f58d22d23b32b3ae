// HybridGpt: a tensor-parallel GPT cut into pipeline stages, replicated
// over data parallelism. The pipeline executor runs the schedule over the
// mesh's pp group; what makes it hybrid lives in the executor's hooks:
// the vocabulary-parallel loss, DataParallel over the dp group (its
// buckets reduced as the last backward makes them final, ZeRO-1's sharded
// update), the sequence-parallel gradient sums over tp, and a clipping
// norm that counts every element of the model once whichever ranks hold
// it.
#include "braid/env.h"
#include "braid/error.h"
#include "braid/kernels.h"
#include "parallel/hybrid/impl.h"

namespace braid::parallel {

namespace {

class VocabParallelLoss : public StageLoss {
 public:
  explicit VocabParallelLoss(std::shared_ptr<Communicator> tp) : ce_(std::move(tp)) {}
  double forward(const Tensor& logits, const Tensor& target) override {
    return ce_.forward(logits, target);
  }
  const Tensor& backward(float scale) override { return ce_.backward(scale); }

 private:
  tp::VocabParallelCrossEntropy ce_;
};

// Rows [first, first + rows) of t along dim 0, as a view.
Tensor row_block(const Tensor& t, int64_t first, int64_t rows) {
  Shape s = t.shape();
  const int64_t per_row = t.numel() / s[0];
  s[0] = rows;
  auto* base = static_cast<char*>(const_cast<void*>(t.raw()));
  return Tensor::view(base + size_t(first * per_row) * dtype_size(t.dtype()), s, t.dtype());
}

}  // namespace

HybridGpt::HybridGpt(const Mesh& mesh, const nn::GptConfig& cfg, uint64_t seed,
                     HybridOptions opts)
    : impl_(std::make_unique<Impl>()), mesh_(mesh) {
  Impl& m = *impl_;
  m.cfg = cfg;
  m.seed = seed;
  m.opts = std::move(opts);
  const HybridOptions& o = m.opts;
  BRAID_CHECK_ARG(o.zero == 0 || o.zero == 1,
                  "hybrid: ZeRO stage " + std::to_string(o.zero) + " (0 or 1 are supported)");
  BRAID_CHECK_ARG(o.micro_batches >= 1,
                  "hybrid: micro_batches " + std::to_string(o.micro_batches) + " (at least 1)");
  // make_schedule names the valid schedules and checks chunks.
  Schedule sched = make_schedule(o.schedule, mesh_.pp_size(), o.micro_batches, o.chunks);
  const size_t count = tp::gpt_module_count(cfg);
  std::vector<double> costs = o.module_costs;
  if (costs.empty()) costs.assign(count, 1.0);
  BRAID_CHECK_ARG(costs.size() == count,
                  "hybrid: " + std::to_string(costs.size()) + " module costs for the GPT's " +
                      std::to_string(count) + " top-level modules");
  m.bounds = partition_layers(costs, sched.stages());
  const std::vector<size_t>& bounds = m.bounds;

  // This rank's virtual stages, as module ranges, one per chunk.
  const int s = mesh_.coord().pp;
  tp::TpGptOptions topts;
  topts.sequence_parallel = o.sequence_parallel;
  for (int c = 0; c < sched.chunks; ++c) {
    const size_t v = size_t(sched.stage_of(s, c));
    topts.modules.push_back({bounds[v], bounds[v + 1]});
  }
  m.model = std::make_unique<tp::TpGpt>(cfg, seed, mesh_.tp(), topts);
  auto chunks_of = [ranges = topts.modules](const tp::TpGpt& model) {
    std::vector<std::vector<nn::Module*>> chunks;
    for (const tp::ModuleRange& r : ranges) {
      chunks.emplace_back();
      for (size_t i = r.begin; i < r.end; ++i) chunks.back().push_back(&model.module(i));
    }
    return chunks;
  };
  // The executor's activation slots run copies of this rank's stages. The
  // executor points a copy's parameters at the model's, so a copy skips
  // initialisation: it costs only its modules' buffers.
  tp::TpGptOptions copy_opts = topts;
  copy_opts.initialise = false;
  ChunkFactory copy = [cfg, seed, tp = mesh_.tp(), copy_opts, chunks_of]() {
    auto model = std::make_shared<tp::TpGpt>(cfg, seed, tp, copy_opts);
    return ChunkCopy{chunks_of(*model), model};
  };
  m.params = m.model->parameters();
  // Before the executor: its slot copies view the buckets' buffers.
  DpOptions dopts;
  dopts.zero = o.zero;
  m.dp = std::make_unique<DataParallel>(mesh_.dp(), *m.model, dopts);

  PipelineOptions popts;
  popts.seed = seed;
  popts.loss = std::make_shared<VocabParallelLoss>(mesh_.tp());
  popts.replica = mesh_.coord().dp;
  popts.replicas = mesh_.dp_size();
  popts.clip = o.clip;
  popts.grad_ready = m.dp->hook();
  popts.reduce_gradients = [this](const std::vector<nn::Parameter*>& params) {
    // The dp sums (buckets the last backward did not finish, then waiting
    // for all) before the tp sums of sequence parallelism's partial
    // gradients: both are sums, so their order does not matter, but the
    // tp all_reduce must not read a bucket still being reduced.
    Impl& m = *impl_;
    const double t0 = now_s();
    m.dp->before_optimizer_step(params);
    tp::reduce_partial_grads(m.model->shards(), *mesh_.tp(), m.partial);
    m.reduce_comm_s += now_s() - t0;
  };
  popts.grad_square_sum = [this](const std::vector<nn::Parameter*>&) {
    // A shard is counted on its rank; a replicated parameter (the same on
    // every tp rank once reduced) on tp rank 0 only. Stages hold disjoint
    // parameters, so the pp sum counts each once.
    double sq = 0;
    for (const tp::Sharded& sh : impl_->model->shards())
      if (sh.spec.dim >= 0 || mesh_.coord().tp == 0)
        sq += sum_squares(sh.param->grad.f32(), sh.param->size());
    const double t0 = now_s();
    mesh_.tp()->all_reduce(&sq, &sq, 1, DType::kF64, ReduceOp::kSum);
    mesh_.pp()->all_reduce(&sq, &sq, 1, DType::kF64, ReduceOp::kSum);
    impl_->step_comm_s += now_s() - t0;
    return sq;
  };
  // Every dp rank holds the full summed gradients (ZeRO 0 and 1 all_reduce
  // them), so clipping above is unchanged; the update is DataParallel's:
  // all parameters, or under ZeRO-1 this rank's chunk of each bucket and
  // then an all_gather (waited for at the end of step()).
  popts.optimizer_step = [this](nn::Optimizer& opt, const std::vector<nn::Parameter*>& params,
                                float lr) { impl_->dp->optimizer_step(opt, params, lr); };
  m.exec = std::make_unique<PipelineExecutor>(mesh_.pp(), chunks_of(*m.model), std::move(copy),
                                              std::move(sched), std::move(popts));
}

HybridGpt::~HybridGpt() = default;

const Schedule& HybridGpt::schedule() const { return impl_->exec->schedule(); }
const std::vector<size_t>& HybridGpt::stage_bounds() const { return impl_->bounds; }
const std::vector<tp::Sharded>& HybridGpt::shards() const { return impl_->model->shards(); }
std::vector<nn::Parameter*> HybridGpt::parameters() const { return impl_->params; }
int64_t HybridGpt::next_step() const { return impl_->exec->next_step(); }
void HybridGpt::set_next_step(int64_t s) { impl_->exec->set_next_step(s); }

int64_t HybridGpt::parameter_bytes() const {
  return nn::count_parameters(impl_->params) * int64_t(sizeof(float));
}

int64_t HybridGpt::optimizer_bytes(const nn::Optimizer& opt) const {
  return impl_->dp->memory(opt).optim_bytes;
}

double HybridGpt::step(const Tensor& x, const Tensor& y, nn::Optimizer& opt, float lr) {
  Impl& m = *impl_;
  const int dp = mesh_.dp_size();
  BRAID_CHECK_ARG(x.ndim() == 2 && x.dtype() == DType::kI32 && y.shape() == x.shape() &&
                      y.dtype() == DType::kI32,
                  "hybrid: tokens " + shape_str(x.shape()) + " " + dtype_name(x.dtype()) +
                      " and targets " + shape_str(y.shape()) + " " + dtype_name(y.dtype()) +
                      " must both be i32 [B, T]");
  const int64_t B = x.dim(0);
  BRAID_CHECK_ARG(B > 0 && B % (int64_t(dp) * m.opts.micro_batches) == 0,
                  "hybrid: global batch " + std::to_string(B) + " does not split into dp=" +
                      std::to_string(dp) + " copies of " + std::to_string(m.opts.micro_batches) +
                      " micro-batches");
  const int64_t rows = B / dp;
  const int64_t first = rows * mesh_.coord().dp;
  const Tensor xs = row_block(x, first, rows), ys = row_block(y, first, rows);

  record_ = {};
  record_.step = m.exec->next_step();
  m.reduce_comm_s = m.step_comm_s = 0;
  const double t0 = now_s();
  m.dp->begin_step(record_.step, m.params);
  double loss = m.exec->step(xs, ys, opt, lr);
  // ZeRO-1's all_gather of the updated chunks ends here, so parameters()
  // are current between steps.
  const double t_gather = now_s();
  m.dp->gather_all_params();
  // Every copy's batch has the same number of targets: the global mean is
  // the mean of the copies' means.
  if (dp > 1) {
    mesh_.dp()->all_reduce(&loss, &loss, 1, DType::kF64, ReduceOp::kSum);
    loss /= dp;
  }
  const double t1 = now_s();
  record_.loss = loss;
  record_.grad_norm = m.exec->grad_norm();
  record_.step_s = t1 - t0;
  record_.peak_activation_bytes = m.exec->peak_held_bytes();
  const auto& list = m.exec->schedule().actions[size_t(mesh_.coord().pp)];
  const auto& times = m.exec->timings();
  double step_action_s = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    const double d = times[i].end - times[i].start;
    switch (list[i].kind) {
      case ActionKind::kForward:
      case ActionKind::kBackward: record_.compute_s += d; break;
      case ActionKind::kComm: record_.bubble_s += d; break;
      case ActionKind::kReduceGrads: break;  // all of it is in reduce_comm_s
      case ActionKind::kStep: step_action_s += d; break;
    }
  }
  record_.compute_s += step_action_s - m.step_comm_s;
  record_.comm_s = m.reduce_comm_s + m.step_comm_s + (t1 - t_gather);
  return loss;
}

const std::vector<ActionTiming>& HybridGpt::timings() const { return impl_->exec->timings(); }

std::unique_ptr<HybridGpt> make_hybrid_gpt(const Mesh& mesh, const nn::GptConfig& cfg,
                                           uint64_t seed, const std::string& schedule,
                                           int micro_batches, HybridOptions opts) {
  opts.schedule = schedule;
  opts.micro_batches = micro_batches;
  if (schedule == "interleaved" && opts.chunks == 1) opts.chunks = 2;
  return std::make_unique<HybridGpt>(mesh, cfg, seed, std::move(opts));
}

}  // namespace braid::parallel
