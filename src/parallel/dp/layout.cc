// DataParallel's layout: units, buckets in grad-ready order, each rank's
// chunk of each bucket, and the optimizer's view of that chunk.
#include "parallel/dp/layout.h"

#include <algorithm>
#include <cstring>

#include "braid/error.h"
#include "braid/trainer.h"
#include "parallel/dp/zero_policy.h"

namespace braid::parallel::dp {

namespace {

int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

Bucket* new_bucket(State& s) {
  s.buckets.push_back(std::make_unique<Bucket>());
  s.buckets.back()->index = s.buckets.size() - 1;
  return s.buckets.back().get();
}

// Buckets in grad-ready order (the reverse of forward order).
void group(State& s, const ZeroPolicy& policy,
           const std::vector<std::vector<nn::Parameter*>>& unit_params) {
  if (policy.bucket_per_unit()) {
    for (size_t u = unit_params.size(); u-- > 0;) {
      if (unit_params[u].empty()) continue;
      Bucket* b = new_bucket(s);
      for (size_t k = unit_params[u].size(); k-- > 0;) b->params.push_back(unit_params[u][k]);
    }
    return;
  }
  // The first bucket small, so that communication starts early in backward.
  // Expert parameters (DpOptions::expert_param) fill buckets of their own.
  for (const bool expert : {false, true}) {
    Bucket* b = nullptr;
    size_t bytes = 0;
    for (size_t k = s.params.size(); k-- > 0;) {
      nn::Parameter* p = s.params[k];
      if (bool(s.opts.expert_param) && s.opts.expert_param(*p) != expert) continue;
      if (!s.opts.expert_param && expert) continue;
      size_t cap = (b != nullptr && b->index == 0) ? s.opts.first_bucket_bytes : s.opts.bucket_bytes;
      if (b == nullptr || bytes >= cap) {
        b = new_bucket(s);
        b->expert = expert;
        if (expert) b->comm = s.opts.expert_dp.get();
        bytes = 0;
      }
      b->params.push_back(p);
      bytes += size_t(p->size()) * 4;
    }
  }
}

// This rank's chunk [c0, c1) of the bucket, cut at parameter borders.
void cut_slices(Bucket& b, int rank) {
  const int64_t c0 = int64_t(rank) * b.shard, c1 = c0 + b.shard;
  for (size_t i = 0; i < b.params.size(); ++i) {
    int64_t lo = std::max(c0, b.offsets[i]);
    int64_t hi = std::min(c1, b.offsets[i] + shape_numel(b.shapes[i]));
    if (lo < hi) b.slices.push_back({i, lo - b.offsets[i], hi - lo, lo - c0});
  }
}

}  // namespace

void lay_out(State& s, ZeroPolicy& policy, nn::Module& model) {
  if (s.opts.expert_param) {
    BRAID_CHECK_ARG(s.opts.zero == 0 && !s.opts.bf16_grads,
                    "DataParallel: expert parallelism needs ZeRO stage 0 and f32 gradients "
                    "(got ZeRO " + std::to_string(s.opts.zero) +
                        (s.opts.bf16_grads ? ", bf16 gradients)" : ")"));
    BRAID_CHECK_ARG(s.opts.expert_dp != nullptr && s.opts.expert_ep != nullptr,
                    "DataParallel: expert parameters without their groups");
  }
  s.params = model.parameters();
  BRAID_CHECK_ARG(!s.params.empty(), "DataParallel: the model has no parameters");
  s.units = nn::units_of(model);
  std::unordered_map<const nn::Parameter*, size_t> unit_of;
  std::vector<std::vector<nn::Parameter*>> unit_params(s.units.size());
  for (size_t u = 0; u < s.units.size(); ++u) {
    unit_params[u] = s.units[u]->parameters();
    for (auto* p : unit_params[u]) unit_of[p] = u;
  }
  group(s, policy, unit_params);

  s.unit_buckets.resize(s.units.size());
  for (auto& bp : s.buckets) {
    Bucket& b = *bp;
    for (auto* p : b.params) {
      BRAID_CHECK_ARG(s.bucket_of.count(p) == 0,
                      "DataParallel: parameter " + p->name + " appears twice in the model");
      s.bucket_of[p] = b.index;
      b.shapes.push_back(p->data.shape());
      b.offsets.push_back(b.numel);
      b.numel += p->size();
      auto& ub = s.unit_buckets[unit_of.at(p)];
      if (std::find(ub.begin(), ub.end(), b.index) == ub.end()) ub.push_back(b.index);
    }
    // Padded to a multiple of the world size: rank r owns chunk r.
    b.padded = round_up(std::max<int64_t>(b.numel, 1), s.world);
    b.shard = b.padded / s.world;

    // Flat parameters, rank 0's values everywhere.
    Tensor full({b.padded});
    for (size_t i = 0; i < b.params.size(); ++i)
      std::memcpy(full.f32() + b.offsets[i], b.params[i]->data.f32(),
                  size_t(b.params[i]->size()) * 4);
    (b.comm != nullptr ? *b.comm : *s.comm).broadcast(full.f32(), size_t(b.padded), DType::kF32, 0);
    policy.place_params(b, std::move(full));
    policy.place_grads(b);
    cut_slices(b, s.rank);
  }

  if (!policy.shards_optimizer()) return;
  for (auto& bp : s.buckets) {
    Bucket& b = *bp;
    for (auto& sl : b.slices) {
      nn::Parameter* p = b.params[sl.i];
      auto sp = std::make_unique<nn::Parameter>(p->name, Shape{0}, p->decay);
      sp->data = Tensor::view(b.shard_params_ptr(s.rank) + sl.at, {sl.count});
      sp->grad = Tensor::view(b.shard_grads_ptr(s.rank) + sl.at, {sl.count});
      s.shard_params.push_back(sp.get());
      s.shard_params_owned.push_back(std::move(sp));
    }
  }
}

}  // namespace braid::parallel::dp
