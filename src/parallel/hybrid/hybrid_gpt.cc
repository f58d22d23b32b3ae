// HybridGpt: a tensor-parallel GPT cut into pipeline stages, replicated
// over data parallelism: this rank's stages (tp::TpGpt), the DataParallel
// over the dp group that owns their gradient buckets, and the pipeline
// executor over the mesh's pp group. HybridTrainer (hybrid_trainer.cc)
// trains it.
#include "braid/env.h"
#include "braid/error.h"
#include "braid/kernels.h"
#include "braid/partition.h"
#include "parallel/hybrid/impl.h"

namespace braid::parallel {

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
  if (costs.empty()) costs = tp::gpt_module_costs(cfg);
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

  m.exec = std::make_unique<PipelineExecutor>(mesh_.pp(), chunks_of(*m.model), std::move(copy),
                                              std::move(sched));
}

HybridGpt::~HybridGpt() = default;

const Schedule& HybridGpt::schedule() const { return impl_->exec->schedule(); }
const std::vector<size_t>& HybridGpt::stage_bounds() const { return impl_->bounds; }
const std::vector<tp::Sharded>& HybridGpt::shards() const { return impl_->model->shards(); }
std::vector<nn::Parameter*> HybridGpt::parameters() const { return impl_->params; }

int64_t HybridGpt::parameter_bytes() const {
  return nn::count_parameters(impl_->params) * int64_t(sizeof(float));
}

int64_t HybridGpt::optimizer_bytes(const nn::Optimizer& opt) const {
  return impl_->dp->memory(opt).optim_bytes;
}

const std::vector<ActionTiming>& HybridGpt::timings() const { return impl_->exec->timings(); }
const PipelineExecutor& HybridGpt::executor() const { return *impl_->exec; }

std::unique_ptr<HybridGpt> make_hybrid_gpt(const Mesh& mesh, const nn::GptConfig& cfg,
                                           uint64_t seed, const std::string& schedule,
                                           int micro_batches, HybridOptions opts) {
  opts.schedule = schedule;
  opts.micro_batches = micro_batches;
  if (schedule == "interleaved" && opts.chunks == 1) opts.chunks = 2;
  return std::make_unique<HybridGpt>(mesh, cfg, seed, std::move(opts));
}

}  // namespace braid::parallel
