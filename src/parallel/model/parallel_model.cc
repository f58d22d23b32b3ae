// parallelize: a spec's model cut into pipeline stages, each split over
// tensor parallelism, replicated over data parallelism: this rank's stages
// (ShardedModel), the DataParallel over the dp group that owns their
// gradient buckets, and the pipeline executor over the mesh's pp group.
// ParallelTrainer (parallel_trainer.cc) trains it.
#include "braid/env.h"
#include "braid/error.h"
#include "braid/kernels.h"
#include "braid/partition.h"
#include "parallel/model/impl.h"

namespace braid::parallel {

ParallelModel::ParallelModel(std::shared_ptr<const ModelSpec> spec, const Mesh& mesh,
                             ParallelOptions opts)
    : impl_(std::make_unique<Impl>()), mesh_(mesh) {
  Impl& m = *impl_;
  BRAID_CHECK_ARG(spec != nullptr, "parallelize: no model spec");
  m.spec = std::move(spec);
  m.opts = std::move(opts);
  const ParallelOptions& o = m.opts;
  const std::string what = "parallelize " + m.spec->name();
  m.pipelined = mesh_.tp_size() > 1 || mesh_.pp_size() > 1;
  BRAID_CHECK_ARG(o.dp.zero >= 0 && o.dp.zero <= 3,
                  what + ": ZeRO stage " + std::to_string(o.dp.zero) + " (0 to 3)");
  BRAID_CHECK_ARG(!m.pipelined || o.dp.zero <= 1,
                  what + ": ZeRO stage " + std::to_string(o.dp.zero) +
                      " beside tp or pp (0 or 1 are supported there; 2 and 3 at tp = pp = 1)");
  BRAID_CHECK_ARG(o.micro_batches >= 1,
                  what + ": micro_batches " + std::to_string(o.micro_batches) + " (at least 1)");
  // make_schedule names the valid schedules and checks chunks.
  Schedule sched = make_schedule(o.schedule, mesh_.pp_size(), o.micro_batches, o.chunks);
  const size_t count = m.spec->unit_count();
  BRAID_CHECK_ARG(size_t(sched.stages()) <= count,
                  what + ": " + std::to_string(sched.stages()) +
                      " pipeline stages, but the model has only " + std::to_string(count) +
                      " units to cut between them: " + m.spec->describe_units());
  std::vector<double> costs = o.unit_costs;
  if (costs.empty()) costs = m.spec->unit_costs();
  BRAID_CHECK_ARG(costs.size() == count, what + ": " + std::to_string(costs.size()) +
                                             " unit costs for the model's " +
                                             std::to_string(count) + " units");
  const int64_t experts = m.spec->experts();
  BRAID_CHECK_ARG(o.ep == 1 || experts > 0,
                  what + ": ep " + std::to_string(o.ep) + " but the model has no experts");
  if (experts > 0) {
    check_expert_layout(mesh_.dp_size(), o.ep);
    BRAID_CHECK_ARG(experts % o.ep == 0, what + ": experts " + std::to_string(experts) +
                                             " not divisible by the expert-parallel size ep " +
                                             std::to_string(o.ep));
    BRAID_CHECK_ARG(o.ep == 1 || (o.dp.zero == 0 && !o.dp.bf16_grads),
                    what + ": expert parallelism (ep " + std::to_string(o.ep) +
                        ") needs ZeRO stage 0 and f32 gradients");
  }
  m.bounds = partition_layers(costs, sched.stages());
  const std::vector<size_t>& bounds = m.bounds;

  // This rank's virtual stages, as unit ranges, one per chunk.
  const int s = mesh_.coord().pp;
  ShardedOptions sopts;
  sopts.sequence_parallel = o.sequence_parallel;
  DpOptions dpo = o.dp;
  if (o.ep > 1) {
    m.experts = make_expert_groups(mesh_, o.ep);
    m.exchange = expert_exchange(m.experts.ep_comm);
    sopts.experts = m.exchange;
    dpo.expert_param = [](const nn::Parameter& p) { return nn::MoeLayer::is_expert_param(p.name); };
    dpo.expert_dp = m.experts.edp_comm;
    dpo.expert_ep = m.experts.ep_comm;
  }
  for (int c = 0; c < sched.chunks; ++c) {
    const size_t v = size_t(sched.stage_of(s, c));
    sopts.units.push_back({bounds[v], bounds[v + 1]});
  }
  m.model = std::make_unique<ShardedModel>(m.spec, mesh_.tp(), sopts);
  if (!o.init_from.empty())
    load_model_slices(o.init_from, m.model->shards(), mesh_.coord().tp, mesh_.tp_size(),
                      m.exchange.get());
  m.params = m.model->parameters();
  // Before the executor: its slot copies view the buckets' buffers. At
  // tp = pp = 1 it owns the whole model (ZeRO-3 gathers unit by unit).
  m.dp = std::make_unique<DataParallel>(mesh_.dp(), *m.model, dpo);
  if (!m.pipelined) return;

  auto chunks_of = [ranges = sopts.units](const ShardedModel& model) {
    std::vector<std::vector<nn::Module*>> chunks;
    for (const UnitRange& r : ranges) {
      chunks.emplace_back();
      for (size_t i = r.begin; i < r.end; ++i) chunks.back().push_back(&model.unit(i));
    }
    return chunks;
  };
  // The executor's activation slots run copies of this rank's stages. The
  // executor points a copy's parameters at the model's, so a copy skips
  // initialisation: it costs only its units' buffers.
  ShardedOptions copy_opts = sopts;
  copy_opts.initialise = false;
  ChunkFactory copy = [spec = m.spec, tp = mesh_.tp(), copy_opts, chunks_of]() {
    auto model = std::make_shared<ShardedModel>(spec, tp, copy_opts);
    return ChunkCopy{chunks_of(*model), model};
  };
  m.exec = std::make_unique<PipelineExecutor>(mesh_.pp(), chunks_of(*m.model), std::move(copy),
                                              std::move(sched));
}

ParallelModel::~ParallelModel() = default;

const ModelSpec& ParallelModel::spec() const { return *impl_->spec; }
const ParallelOptions& ParallelModel::options() const { return impl_->opts; }
bool ParallelModel::pipelined() const { return impl_->pipelined; }

const PipelineExecutor& ParallelModel::executor() const {
  BRAID_CHECK_ARG(impl_->pipelined, "parallelize " + impl_->spec->name() +
                                        ": no pipeline at tp = pp = 1 (data parallel only)");
  return *impl_->exec;
}
const Schedule& ParallelModel::schedule() const { return executor().schedule(); }
const std::vector<ActionTiming>& ParallelModel::timings() const { return executor().timings(); }
const std::vector<size_t>& ParallelModel::stage_bounds() const { return impl_->bounds; }
const std::vector<tp::Sharded>& ParallelModel::shards() const { return impl_->model->shards(); }
std::vector<nn::Parameter*> ParallelModel::parameters() const { return impl_->params; }

int64_t ParallelModel::parameter_bytes() const {
  if (impl_->dp->options().zero == 3) return impl_->dp->memory().param_bytes;
  return nn::count_parameters(impl_->params) * int64_t(sizeof(float));
}

DataParallel& ParallelModel::data_parallel() const { return *impl_->dp; }
const ExpertGroups& ParallelModel::expert_groups() const { return impl_->experts; }

int64_t ParallelModel::optimizer_bytes(const nn::Optimizer& opt) const {
  return impl_->dp->memory(opt).optim_bytes;
}

std::unique_ptr<ParallelModel> parallelize(std::shared_ptr<const ModelSpec> spec, const Mesh& mesh,
                                           ParallelOptions opts) {
  if (opts.schedule == "interleaved" && opts.chunks == 1) opts.chunks = 2;
  return std::make_unique<ParallelModel>(std::move(spec), mesh, std::move(opts));
}

}  // namespace braid::parallel
