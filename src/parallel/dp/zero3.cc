// ZeRO stage 3: parameters sharded too, one bucket per unit. Between uses
// a unit's parameters exist only as this rank's chunk; before_forward /
// before_backward wait for the unit's all_gather (issuing it if it was not
// prefetched) and start the gather of the next unit in that direction;
// after_forward / after_backward free them again — except the last unit,
// which stays gathered between its forward and its backward.
#include <cstring>

#include "parallel/dp/zero_policy.h"

namespace braid::parallel::dp {

void Zero3::place_params(Bucket& b, Tensor&& full) {
  b.param_shard = Tensor({b.shard});
  std::memcpy(b.param_shard.f32(), full.f32() + int64_t(s_.rank) * b.shard, size_t(b.shard) * 4);
  b.params_live = false;
  for (auto* p : b.params) p->data = Tensor();
}

void Zero3::before_forward(size_t unit) {
  Zero2::before_forward(unit);
  s_.for_buckets_of(s_.unit_with_params(int64_t(unit) + 1, +1),
                    [&](Bucket& b) { gather_params(b); });
}

void Zero3::after_forward(size_t unit) {
  if (s_.unit_with_params(int64_t(unit) + 1, +1) == State::kNone) return;  // backward is next
  s_.for_buckets_of(unit, [&](Bucket& b) { release_params(b); });
}

void Zero3::before_backward(size_t unit) {
  Zero2::before_backward(unit);
  s_.for_buckets_of(s_.unit_with_params(int64_t(unit) - 1, -1),
                    [&](Bucket& b) { gather_params(b); });
}

void Zero3::after_backward(size_t unit) {
  s_.for_buckets_of(unit, [&](Bucket& b) { release_params(b); });
  Zero2::after_backward(unit);
}

void Zero3::optimizer_step(nn::Optimizer& opt, float lr) {
  opt.step(s_.shard_params, lr);
  // Prefetch the first unit of the next step; the rest follow in forward.
  s_.for_buckets_of(s_.unit_with_params(0, +1), [&](Bucket& b) { gather_params(b); });
}

void Zero3::gather_params(Bucket& b) {
  if (b.gather_pending || b.params_live) return;
  b.param.resize({b.padded});
  s_.track(b.padded * 4);
  b.point_params();
  if (s_.world == 1) {  // the chunk is the whole bucket
    std::memcpy(b.param.f32(), b.param_shard.f32(), size_t(b.padded) * 4);
    b.params_live = true;
    return;
  }
  b.gather_work = s_.comm->all_gather_async(b.param_shard.f32(), b.param.f32(), size_t(b.shard),
                                            DType::kF32);
  b.gather_pending = true;
}

void Zero3::release_params(Bucket& b) {
  if (!b.params_live || b.gather_pending) return;
  b.param.release();
  s_.track(-b.padded * 4);
  for (auto* p : b.params) p->data = Tensor();
  b.params_live = false;
}

}  // namespace braid::parallel::dp
