// The sharded DLRM's all_to_all exchange: ids to the table owners, pooled
// bags back, and their gradients to the owners (exchange.h).
#include "exchange.h"

#include <algorithm>
#include <cstring>

#include "braid/error.h"
#include "braid/env.h"

namespace braid::parallel::embed {
namespace {

// n 4-byte words; none is no call (an empty vector's data() may be null,
// which memcpy may not be given even for 0 bytes).
void copy_words(void* dst, const void* src, size_t n) {
  if (n) std::memcpy(dst, src, n * 4);
}

}  // namespace

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

void Exchange::set_sizes(int64_t b, const std::vector<int64_t>& known) {
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
  pooled_out_.resize(cols_owner_.total);
  pooled_in_.resize(cols_batch_.total);
}

void Exchange::send_ids(const std::vector<Tensor>& ids, const std::vector<int64_t>& known) {
  set_sizes(ids.empty() ? 0 : ids.front().dim(0), known);
  ids_out_.resize(ids_batch_.total);
  ids_in_.resize(ids_owner_.total);
  pack_ids(ids, ids_out_.data());
  run(ids_out_.data(), ids_batch_, ids_in_.data(), ids_owner_, DType::kI32);
}

// Each owner's blocks' ids, in ids_batch_'s layout.
void Exchange::pack_ids(const std::vector<Tensor>& ids, int32_t* out) const {
  const int64_t b = batch_[size_t(rank_)];
  for (int o = 0; o < world_; ++o)
    for (size_t k = 0; k < owned_[size_t(o)].size(); ++k) {
      const Tensor& t = ids[size_t(owned_[size_t(o)][k].f)];
      BRAID_CHECK_ARG(t.dim(0) == b, "sharded embeddings: prefetched ids of " +
                                         std::to_string(t.dim(0)) + " samples for a batch of " +
                                         std::to_string(b));
      std::copy(t.i32(), t.i32() + b * bag_, out + ids_batch_.at[size_t(o)][k]);
    }
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

void Exchange::send_grads(const std::vector<Tensor>* next_ids) {
  grad_out_.resize(cols_batch_.total);
  grad_in_.resize(cols_owner_.total);
  if (next_ids == nullptr) {
    run(grad_out_.data(), cols_batch_, grad_in_.data(), cols_owner_, DType::kF32);
    return;
  }
  // Per peer: its gradient columns, then its next ids, as 4-byte words
  // (an all_to_all_v moves bytes; nothing is reduced).
  auto joined = [&](const Layout& a, const Layout& b) {
    Layout l;
    for (int p = 0; p < world_; ++p) {
      l.displs.push_back(l.total);
      l.counts.push_back(a.counts[size_t(p)] + b.counts[size_t(p)]);
      l.total += l.counts.back();
    }
    return l;
  };
  const Layout out = joined(cols_batch_, ids_batch_), in = joined(cols_owner_, ids_owner_);
  std::vector<int32_t> next(ids_batch_.total);
  pack_ids(*next_ids, next.data());
  packed_out_.resize(out.total);
  packed_in_.resize(in.total);
  for (int p = 0; p < world_; ++p) {
    const size_t g = cols_batch_.counts[size_t(p)];
    copy_words(packed_out_.data() + out.displs[size_t(p)],
                grad_out_.data() + cols_batch_.displs[size_t(p)], g);
    copy_words(packed_out_.data() + out.displs[size_t(p)] + g,
                next.data() + ids_batch_.displs[size_t(p)], ids_batch_.counts[size_t(p)]);
  }
  run(packed_out_.data(), out, packed_in_.data(), in, DType::kI32);
  ids_next_in_.resize(ids_owner_.total);
  for (int p = 0; p < world_; ++p) {
    const size_t g = cols_owner_.counts[size_t(p)];
    copy_words(grad_in_.data() + cols_owner_.displs[size_t(p)],
                packed_in_.data() + in.displs[size_t(p)], g);
    copy_words(ids_next_in_.data() + ids_owner_.displs[size_t(p)],
                packed_in_.data() + in.displs[size_t(p)] + g, ids_owner_.counts[size_t(p)]);
  }
}

void Exchange::use_prefetched_ids(int64_t b, const std::vector<int64_t>& known) {
  BRAID_CHECK_ARG(!known.empty(), "sharded embeddings: prefetched ids need known batch sizes");
  set_sizes(b, known);
  BRAID_CHECK_ARG(ids_next_in_.size() == ids_owner_.total,
                  "sharded embeddings: the prefetched ids are for batches of other sizes");
  ids_in_.swap(ids_next_in_);
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
