// The sampler: a seeded Fisher-Yates permutation per epoch, cut into
// global batches, each cut into contiguous per-rank shards.
#include "braid/data.h"
#include "braid/error.h"
#include "braid/rng.h"

namespace braid::nn {

Sampler::Sampler(int64_t dataset_size, int64_t global_batch, uint64_t seed, bool shuffle,
                 int rank, int world)
    : size_(dataset_size), batch_(global_batch), seed_(seed), shuffle_(shuffle), rank_(rank),
      world_(world) {
  BRAID_CHECK_ARG(world >= 1 && rank >= 0 && rank < world,
                  "sampler: rank " + std::to_string(rank) + " outside world " +
                      std::to_string(world));
  BRAID_CHECK_ARG(global_batch >= world,
                  "sampler: global batch " + std::to_string(global_batch) +
                      " smaller than world " + std::to_string(world));
  BRAID_CHECK_ARG(dataset_size >= global_batch,
                  "sampler: data set of " + std::to_string(dataset_size) +
                      " samples is smaller than one batch of " + std::to_string(global_batch));
  steps_per_epoch_ = size_ / batch_;
  shard_begin_ = int64_t(rank) * batch_ / world;
  shard_end_ = int64_t(rank + 1) * batch_ / world;
}

const std::vector<int64_t>& Sampler::epoch_order(int64_t epoch) {
  if (epoch == cached_epoch_) return order_;
  order_.resize(size_t(size_));
  for (int64_t i = 0; i < size_; ++i) order_[size_t(i)] = i;
  if (shuffle_) {
    CounterRng rng(seed_, 0x5a3b1e00ull + uint64_t(epoch));
    for (int64_t i = size_ - 1; i > 0; --i) {
      int64_t j = int64_t(rng.below(uint64_t(i + 1)));
      std::swap(order_[size_t(i)], order_[size_t(j)]);
    }
  }
  cached_epoch_ = epoch;
  return order_;
}

void Sampler::shard(int64_t step, std::vector<int64_t>& out) {
  BRAID_CHECK_ARG(step >= 0, "sampler: negative step");
  const auto& order = epoch_order(step / steps_per_epoch_);
  int64_t base = (step % steps_per_epoch_) * batch_;
  out.assign(order.begin() + base + shard_begin_, order.begin() + base + shard_end_);
}

void Sampler::global(int64_t step, std::vector<int64_t>& out) {
  BRAID_CHECK_ARG(step >= 0, "sampler: negative step");
  const auto& order = epoch_order(step / steps_per_epoch_);
  int64_t base = (step % steps_per_epoch_) * batch_;
  out.assign(order.begin() + base, order.begin() + base + batch_);
}

}  // namespace braid::nn
