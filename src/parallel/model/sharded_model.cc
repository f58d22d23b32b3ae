// ShardedModel: a ModelSpec's units over a tensor-parallel group. Its
// parameters are initialised by building the serial model for the spec's
// seed and keeping this rank's slices: every parameter then equals the
// serial one exactly, at any group size, with no second copy of any
// model's initialisation scheme.
#include "braid/sharded_model.h"

#include <atomic>
#include <map>

#include "braid/error.h"

namespace braid::parallel {

namespace {

std::atomic<int64_t> g_serial_builds{0};

// Copies into every shard its slice of the serial model's parameter of the
// same name and shape.
void init_from_serial(const ModelSpec& spec, std::vector<tp::Sharded>& shards, int rank, int size,
                      const nn::ExpertExchange* ep) {
  g_serial_builds.fetch_add(1, std::memory_order_relaxed);
  auto serial = spec.build_serial();
  std::map<std::string, nn::Parameter*> by_name;
  for (nn::Parameter* p : serial->parameters()) by_name[p->name] = p;
  for (tp::Sharded& s : shards) {
    auto it = by_name.find(s.param->name);
    if (it == by_name.end() || it->second->data.shape() != s.full)
      throw Error(Errc::kInternal, spec.name() + ": parameter " + s.param->name +
                                       " has no serial twin of shape " + shape_str(s.full));
    Tensor mine = tp::slice_shard(it->second->data, s.spec, rank, size);
    if (s.expert && ep != nullptr)
      mine = tp::slice_shard(mine, tp::ShardSpec{0, 1, false}, ep->rank(), ep->size());
    s.param->data.copy_from(mine);
    by_name.erase(it);
  }
}

}  // namespace

ShardedModel::ShardedModel(std::shared_ptr<const ModelSpec> spec, std::shared_ptr<Communicator> tp,
                           ShardedOptions opts)
    : Sequential(spec ? spec->name() : "model"),
      spec_(std::move(spec)),
      tp_(std::move(tp)),
      opts_(std::move(opts)) {
  BRAID_CHECK_ARG(spec_ != nullptr, "ShardedModel: no model spec");
  BRAID_CHECK_ARG(tp_ != nullptr, "ShardedModel: no tensor-parallel communicator");
  const int n = tp_->size();
  spec_->check_split(n, opts_.sequence_parallel);
  const size_t count = spec_->unit_count();
  std::vector<bool> wanted(count, opts_.units.empty());
  for (const UnitRange& r : opts_.units) {
    BRAID_CHECK_ARG(r.begin < r.end && r.end <= count,
                    spec_->name() + ": unit range [" + std::to_string(r.begin) + ", " +
                        std::to_string(r.end) + ") is empty or outside the model's " +
                        std::to_string(count) + " units");
    for (size_t i = r.begin; i < r.end; ++i) wanted[i] = true;
  }
  units_.assign(count, nullptr);
  for (size_t i = 0; i < count; ++i)
    if (wanted[i])
      units_[i] = &add(spec_->build_unit_ep(i, tp_, opts_.experts, opts_.sequence_parallel, shards_));
  if (opts_.initialise) init_from_serial(*spec_, shards_, tp_->rank(), n, opts_.experts.get());
}

int64_t ShardedModel::serial_builds() { return g_serial_builds.load(std::memory_order_relaxed); }

ShardedModel::~ShardedModel() = default;

bool ShardedModel::whole() const {
  for (nn::Module* u : units_)
    if (u == nullptr) return false;
  return true;
}

nn::Module& ShardedModel::unit(size_t i) const {
  BRAID_CHECK_ARG(has_unit(i), spec_->name() + ": unit " + std::to_string(i) + " of " +
                                   std::to_string(units_.size()) + " is not built on this rank");
  return *units_[i];
}

const Tensor& ShardedModel::forward(const Tensor& x, nn::Context& ctx) {
  for (size_t i = 0; i < units_.size(); ++i) unit(i);  // all present, or a clear error
  spec_->check_input(x, tp_->size(), opts_.sequence_parallel);
  return Sequential::forward(x, ctx);
}

const Tensor& ShardedModel::backward(const Tensor& dy, nn::Context& ctx) {
  for (size_t i = 0; i < units_.size(); ++i) unit(i);
  return Sequential::backward(dy, ctx);
}

void ShardedModel::collect_parameters(std::vector<nn::Parameter*>& out) {
  for (const tp::Sharded& s : shards_) out.push_back(s.param);
}

}  // namespace braid::parallel
