// ZeRO stage 0: every rank holds all parameters, gradients and optimizer
// state; a bucket's gradients are all_reduce'd in place.
#include "braid/error.h"
#include "parallel/dp/zero_policy.h"

namespace braid::parallel::dp {

void Replicated::place_params(Bucket& b, Tensor&& full) {
  b.param = std::move(full);
  b.point_params();
}

void Replicated::place_grads(Bucket& b) {
  // In shared memory one host's ranks sum the buckets straight out of each
  // other's memory (the "shared" all-reduce). bf16 gradients are sent from
  // a staging copy, so there the bucket stays private.
  if (s_.opts.shared_buckets && !s_.opts.bf16_grads && s_.world > 1) {
    b.grad_mem = s_.comm->alloc_shared(size_t(b.padded) * 4);
    b.grad = Tensor::view(b.grad_mem.data(), {b.padded});
  } else {
    b.grad = Tensor({b.padded});
  }
  b.point_grads();
}

void Replicated::begin_step(Bucket& b) { b.grad.zero(); }

void Replicated::reduce(Bucket& b) {
  s_.comm->all_reduce(b.grad.f32(), b.grad.f32(), size_t(b.padded), DType::kF32, ReduceOp::kSum);
}

Work Replicated::reduce_async(Bucket& b) {
  return s_.comm->all_reduce_async(b.grad.f32(), b.grad.f32(), size_t(b.padded), DType::kF32,
                                   ReduceOp::kSum);
}

double Replicated::clip_grad_norm(double max_norm) {
  return nn::clip_grad_norm(s_.params, max_norm);
}

void Replicated::optimizer_step(nn::Optimizer& opt, float lr) { opt.step(s_.params, lr); }

}  // namespace braid::parallel::dp
