// HybridDlrmTrainer: nn::Trainer over a DLRM whose MLPs are data parallel
// and whose tables are sharded (include/braid/hybrid_dlrm.h).
#include "braid/hybrid_dlrm.h"

#include <algorithm>
#include <functional>

#include "braid/checkpoint.h"
#include "braid/dp_trainer.h"
#include "braid/error.h"
#include "braid/module.h"

namespace braid::parallel {

// DataParallel's stages, with the tables' around the optimizer step.
class HybridDlrmTrainer::Hooks : public nn::StepHooks {
 public:
  Hooks(DataParallel& dp, ShardedTables& t, std::function<void(int64_t, int)> prefetch)
      : dp_(dp), t_(t), prefetch_(std::move(prefetch)) {}
  void begin_step(int64_t step, const std::vector<nn::Parameter*>& p) override {
    step_ = step;
    micro_ = 0;
    t_.begin_step();
    dp_.begin_step(step, p);
  }
  void before_forward(size_t u) override { dp_.before_forward(u); }
  void after_forward(size_t u) override { dp_.after_forward(u); }
  void before_backward(size_t u) override {
    prefetch_(step_, micro_++);  // the micro-batch after this one
    dp_.before_backward(u);
  }
  void after_backward(size_t u) override { dp_.after_backward(u); }
  nn::GradReadyHook grad_ready_hook() override { return dp_.grad_ready_hook(); }
  void before_optimizer_step(const std::vector<nn::Parameter*>& p) override {
    dp_.before_optimizer_step(p);
  }
  double clip_grad_norm(const std::vector<nn::Parameter*>&, double) override {
    throw Error(Errc::kNotSupported, "clipping is not built for sharded tables");
  }
  void optimizer_step(nn::Optimizer& opt, const std::vector<nn::Parameter*>& p,
                      float lr) override {
    dp_.optimizer_step(opt, p, lr);
    t_.apply(lr);
  }
  void after_step(nn::StepState& st) override { dp_.after_step(st); }

 private:
  DataParallel& dp_;
  ShardedTables& t_;
  std::function<void(int64_t, int)> prefetch_;
  int64_t step_ = 0;
  int micro_ = 0;
};

namespace {
nn::TrainOptions placed(nn::TrainOptions o, const Communicator& c) {
  o.rank = c.rank();
  o.world = c.size();
  return o;
}
}  // namespace

HybridDlrmTrainer::HybridDlrmTrainer(std::shared_ptr<Communicator> comm,
                                     const nn::DlrmConfig& cfg, uint64_t seed, EmbeddingPlan plan,
                                     nn::RowOptimizer table_opt, nn::Dataset& data,
                                     nn::Optimizer& opt, nn::LrSchedule schedule,
                                     nn::TrainOptions opts, DpOptions dpo)
    : comm_(std::move(comm)), opt_(opt), data_(data), cfg_(cfg), accum_(std::max(1, opts.accum)) {
  BRAID_CHECK_ARG(opts.clip <= 0, "gradient clipping (--clip) is not built for sharded tables: "
                                  "the norm would span their sparse gradients");
  BRAID_CHECK_ARG(plan.world == comm_->size(),
                  "the embedding plan is for " + std::to_string(plan.world) +
                      " ranks, the job has " + std::to_string(comm_->size()));
  BRAID_CHECK_ARG(dpo.zero == 0, "sharded tables train beside ZeRO 0 only (the MLPs are small)");
  table_comm_ = comm_->split(0, comm_->rank());
  auto tables = std::make_unique<ShardedTables>(table_comm_, cfg, seed, std::move(plan), table_opt);
  tables_ = tables.get();
  model_ = nn::make_dlrm(cfg, seed, std::move(tables));
  dp_ = std::make_unique<DataParallel>(comm_, *model_, dpo);
  trainer_ = std::make_unique<nn::Trainer>(*model_, data, opt, schedule, placed(opts, *comm_));
  hooks_ = std::make_unique<Hooks>(*dp_, *tables_,
                                   [this](int64_t step, int micro) { prefetch(step, micro); });
  trainer_->set_hooks(*hooks_);
  // Every rank's micro-batch: its contiguous share of the global batch
  // (nn::Sampler) over accum.
  const int64_t B = opts.global_batch, w = comm_->size();
  for (int64_t q = 0; q < w; ++q)
    train_batches_.push_back(((q + 1) * B / w - q * B / w) / std::max(1, opts.accum));
}

HybridDlrmTrainer::~HybridDlrmTrainer() = default;

void HybridDlrmTrainer::prefetch(int64_t step, int micro) {
  // The sampler is deterministic: the next micro-batch's rows are known.
  if (++micro == accum_) {
    ++step;
    micro = 0;
  }
  trainer_->sampler().shard(step, next_rows_);
  const int64_t n = int64_t(next_rows_.size()) / accum_;
  data_.gather(next_rows_.data() + micro * n, n, next_x_, next_y_);
  nn::dlrm_split_input(cfg_, next_x_, next_dense_, next_ids_, "dlrm (next batch)");
  tables_->prefetch(next_ids_);
}

int64_t HybridDlrmTrainer::mlp_parameters() const {
  return nn::count_parameters(model_->parameters());
}

nn::StepStats HybridDlrmTrainer::step() {
  tables_->take_exchange_seconds();
  tables_->set_batches(train_batches_);
  nn::StepStats st = trainer_->step();
  exchange_s_ = tables_->take_exchange_seconds();
  return st;
}

nn::EvalStats HybridDlrmTrainer::evaluate(const nn::Dataset& data, int64_t batch) {
  BRAID_CHECK_ARG(batch > 0, "evaluation batch must be positive");
  const int64_t n = data.size(), w = comm_->size(), r = comm_->rank();
  const int64_t begin = r * n / w, local = (r + 1) * n / w - begin;
  int64_t most = 0, fewest = n;
  for (int64_t q = 0; q < w; ++q) {
    const int64_t m = (q + 1) * n / w - q * n / w;
    most = std::max(most, m);
    fewest = std::min(fewest, m);
  }
  const int64_t batches = (most + batch - 1) / batch;
  BRAID_CHECK_ARG(fewest >= batches && batches > 0,
                  "evaluation: " + std::to_string(n) + " rows do not give each of " +
                      std::to_string(w) + " ranks a row for each of " + std::to_string(batches) +
                      " batches");
  // The same number of batches on every rank (each forward is collective).
  nn::EvalSums mine;
  std::vector<int64_t> sizes(static_cast<size_t>(w));
  for (int64_t k = 0; k < batches; ++k) {
    for (int64_t q = 0; q < w; ++q) {
      const int64_t lq = (q + 1) * n / w - q * n / w;
      sizes[size_t(q)] = (k + 1) * lq / batches - k * lq / batches;
    }
    tables_->set_batches(sizes);
    const int64_t a = begin + k * local / batches, b = begin + (k + 1) * local / batches;
    nn::EvalSums s = trainer_->eval_sums(data, b - a, a, b);
    mine.loss += s.loss;
    mine.correct += s.correct;
    mine.rows += s.rows;
  }
  tables_->set_batches({});
  return all_reduce_eval(*comm_, mine);
}

void HybridDlrmTrainer::save(const std::string& path) {
  Checkpoint ck;
  dp_->add_state(ck, opt_);
  tables_->add_state(ck);
  trainer_->add_meta(ck);
  ck.meta["dp/world"] = std::to_string(comm_->size());
  if (comm_->rank() == 0) save_checkpoint(path, ck);
  comm_->barrier();
}

void HybridDlrmTrainer::load(const std::string& path) {
  Checkpoint ck = load_checkpoint(path);
  const int64_t step = resume_step(ck, trainer_->options().seed, path);
  dp_->load_state(ck, opt_);
  tables_->load_state(ck);
  trainer_->set_next_step(step);
  trainer_->restore_meta(ck.meta);
}

}  // namespace braid::parallel
