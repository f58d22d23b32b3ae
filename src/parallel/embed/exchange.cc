// The sharded DLRM's all_to_all exchange: ids to the table owners, pooled
// bags back, and their gradients to the owners (exchange.h).
#include "exchange.h"

#include <algorithm>

#include "braid/error.h"
#include "braid/env.h"

namespace braid::parallel::embed {

Exchange::Exchange(std::shared_ptr<Communicator> comm, const EmbeddingPlan& plan, int64_t bag)
    : comm_(std::move(comm)), rank_(comm_->rank()), world_(comm_->size()), bag_(bag) {
  BRAID_CHECK_ARG(plan.world == world_, "sharded embeddings: the plan is for " +
                                            std::to_string(plan.world) + " ranks, the job has " +
                                            std::to_string(world_));
  owned_.resize(size_t(world_));
  for (size_t f = 0; f < plan.tables.size(); ++f)
    for (const TableShard& s : plan.tables[f].shards) owned_[size_t(s.rank)].push_back({int64_t(f), s});
  batch_.assign(size_t(world_), 0);
}

Exchange::Layout Exchange::layout(bool owner_side, bool ids) const {
  Layout l;
  l.counts.resize(size_t(world_));
  l.displs.resize(size_t(world_));
  l.at.resize(size_t(world_));
  for (int p = 0; p < world_; ++p) {
    const int64_t rows = batch_[size_t(owner_side ? p : rank_)];
    l.displs[size_t(p)] = l.total;
    for (const Block& b : owned_[size_t(owner_side ? rank_ : p)]) {
      l.at[size_t(p)].push_back(l.total);
      l.total += size_t(rows * (ids ? bag_ : b.shard.cols()));
    }
    l.counts[size_t(p)] = l.total - l.displs[size_t(p)];
  }
  return l;
}

void Exchange::run(const void* send, const Layout& out, void* recv, const Layout& in, DType t) {
  const double t0 = now_s();
  comm_->all_to_all_v(send, out.counts, out.displs, recv, in.counts, in.displs, t);
  seconds_ += now_s() - t0;
}

void Exchange::send_ids(const std::vector<Tensor>& ids, const std::vector<int64_t>& known) {
  const int64_t b = ids.empty() ? 0 : ids.front().dim(0);
  if (known.empty()) {
    const double t0 = now_s();
    comm_->all_gather(&b, batch_.data(), 1, DType::kI64);
    seconds_ += now_s() - t0;
  } else {
    BRAID_CHECK_ARG(int(known.size()) == world_ && known[size_t(rank_)] == b,
                    "sharded embeddings: this rank's batch of " + std::to_string(b) +
                        " samples is not the one announced for it");
    batch_ = known;
  }
  ids_batch_ = layout(false, true);
  ids_owner_ = layout(true, true);
  cols_batch_ = layout(false, false);
  cols_owner_ = layout(true, false);
  ids_out_.resize(ids_batch_.total);
  ids_in_.resize(ids_owner_.total);
  for (int o = 0; o < world_; ++o)
    for (size_t k = 0; k < owned_[size_t(o)].size(); ++k) {
      const Tensor& t = ids[size_t(owned_[size_t(o)][k].f)];
      std::copy(t.i32(), t.i32() + b * bag_, ids_out_.data() + ids_batch_.at[size_t(o)][k]);
    }
  run(ids_out_.data(), ids_batch_, ids_in_.data(), ids_owner_, DType::kI32);
  pooled_out_.resize(cols_owner_.total);
  pooled_in_.resize(cols_batch_.total);
}

const int32_t* Exchange::ids(int s, size_t k) const {
  return ids_in_.data() + ids_owner_.at[size_t(s)][k];
}

float* Exchange::pooled_out(int s, size_t k) {
  return pooled_out_.data() + cols_owner_.at[size_t(s)][k];
}

void Exchange::return_pooled() {
  run(pooled_out_.data(), cols_owner_, pooled_in_.data(), cols_batch_, DType::kF32);
}

const float* Exchange::pooled_in(int o, size_t k) const {
  return pooled_in_.data() + cols_batch_.at[size_t(o)][k];
}

float* Exchange::grad_out(int o, size_t k) {
  grad_out_.resize(cols_batch_.total);
  return grad_out_.data() + cols_batch_.at[size_t(o)][k];
}

void Exchange::send_grads() {
  grad_out_.resize(cols_batch_.total);
  grad_in_.resize(cols_owner_.total);
  run(grad_out_.data(), cols_batch_, grad_in_.data(), cols_owner_, DType::kF32);
}

const float* Exchange::grad_in(int s, size_t k) const {
  return grad_in_.data() + cols_owner_.at[size_t(s)][k];
}

double Exchange::take_seconds() {
  const double s = seconds_;
  seconds_ = 0;
  return s;
}

}  // namespace braid::parallel::embed
