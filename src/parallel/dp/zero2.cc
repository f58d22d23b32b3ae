// ZeRO stage 2: gradients sharded too. A bucket's full gradient buffer is
// allocated (zeroed) when a unit's backward first needs it, reduce_scatter'ed
// into this rank's chunk, and freed once that reduction ends.
#include <cstring>

#include "parallel/dp/zero_policy.h"

namespace braid::parallel::dp {

void Zero2::place_grads(Bucket& b) {
  b.grad_shard = Tensor({b.shard});
  b.grads_live = false;
  for (auto* p : b.params) p->grad = Tensor();
}

// The full buffers are allocated zeroed by State::ensure_grads.
void Zero2::begin_step(Bucket& b) { (void)b; }

void Zero2::after_backward(size_t unit) {
  (void)unit;
  s_.poll_done();
  // Bound the full-size gradient buffers still waiting for their
  // reduce_scatter: beyond two, wait for the oldest (that is the memory
  // this stage exists to save; waiting issues nothing, so ranks stay in step).
  s_.bound_in_flight(2);
}

void Zero2::reduce(Bucket& b) {
  s_.comm->reduce_scatter(b.grad.f32(), b.grad_shard.f32(), size_t(b.shard), DType::kF32,
                          ReduceOp::kSum);
}

Work Zero2::reduce_async(Bucket& b) {
  return s_.comm->reduce_scatter_async(b.grad.f32(), b.grad_shard.f32(), size_t(b.shard),
                                       DType::kF32, ReduceOp::kSum);
}

void Zero2::reduce_alone(Bucket& b) {
  std::memcpy(b.grad_shard.f32(), b.grad.f32(), size_t(b.padded) * 4);
}

void Zero2::reduced(Bucket& b) { s_.release_grads(b); }

}  // namespace braid::parallel::dp
