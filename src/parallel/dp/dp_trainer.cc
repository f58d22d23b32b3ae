// DpTrainer: nn::Trainer with DataParallel as its hooks; what remains here
// is what has no place in one step — evaluation split across ranks and
// consolidated checkpoints.
#include "braid/dp_trainer.h"

#include "braid/checkpoint.h"
#include "braid/error.h"

namespace braid::parallel {

namespace {
nn::TrainOptions placed(nn::TrainOptions o, Communicator& c) {
  o.rank = c.rank();
  o.world = c.size();
  return o;
}
}  // namespace

nn::EvalStats all_reduce_eval(Communicator& comm, const nn::EvalSums& mine) {
  double v[3] = {mine.loss, double(mine.correct), double(mine.rows)};
  comm.all_reduce(v, v, 3, DType::kF64, ReduceOp::kSum);
  nn::EvalSums all;
  all.loss = v[0];
  all.correct = int64_t(v[1]);
  all.rows = int64_t(v[2]);
  return all.stats();
}

DpTrainer::DpTrainer(std::shared_ptr<Communicator> comm, nn::Module& model, nn::Dataset& data,
                     nn::Optimizer& opt, nn::LrSchedule schedule, nn::TrainOptions opts,
                     DpOptions dp)
    : comm_(comm),
      opt_(opt),
      dp_(comm, model, dp),
      trainer_(model, data, opt, schedule, placed(opts, *comm)) {
  dp_.attach(trainer_);
}

nn::EvalStats DpTrainer::evaluate(const nn::Dataset& data, int64_t batch) {
  BRAID_CHECK_ARG(batch > 0, "evaluation batch must be positive");
  const int64_t n = data.size(), w = dp_.world(), r = dp_.rank();
  dp_.gather_all_params();
  nn::EvalSums mine = trainer_.eval_sums(data, batch, r * n / w, (r + 1) * n / w);
  dp_.release_all_params();
  return all_reduce_eval(*comm_, mine);
}

void DpTrainer::save(const std::string& path) {
  Checkpoint ck;
  dp_.add_state(ck, opt_);
  trainer_.add_meta(ck);
  ck.meta["dp/world"] = std::to_string(dp_.world());
  ck.meta["dp/zero"] = std::to_string(dp_.options().zero);
  if (dp_.rank() == 0) save_checkpoint(path, ck);
  comm_->barrier();  // the file exists for everyone once save returns
}

void DpTrainer::load(const std::string& path) {
  Checkpoint ck = load_checkpoint(path);
  const int64_t step = resume_step(ck, trainer_.options().seed, path);  // checks before loading
  dp_.load_state(ck, opt_);
  trainer_.set_next_step(step);
  trainer_.restore_meta(ck.meta);
}

}  // namespace braid::parallel
