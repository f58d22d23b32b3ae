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
  if (s_.opts.shared_buckets && !s_.opts.bf16_grads && s_.world > 1 && !b.expert) {
    b.grad_mem = s_.comm->alloc_shared(size_t(b.padded) * 4);
    b.grad_mem_counted = CountedStorage(size_t(b.padded) * 4);
    b.grad = Tensor::view(b.grad_mem.data(), {b.padded});
  } else {
    b.grad = Tensor({b.padded});
  }
  b.point_grads();
}

void Replicated::begin_step(Bucket& b) { b.grad.zero(); }

void Replicated::reduce(Bucket& b) {
  Communicator& c = b.comm != nullptr ? *b.comm : *s_.comm;
  c.all_reduce(b.grad.f32(), b.grad.f32(), size_t(b.padded), DType::kF32, ReduceOp::kSum);
}

Work Replicated::reduce_async(Bucket& b) {
  Communicator& c = b.comm != nullptr ? *b.comm : *s_.comm;
  return c.all_reduce_async(b.grad.f32(), b.grad.f32(), size_t(b.padded), DType::kF32,
                            ReduceOp::kSum);
}

double Replicated::clip_grad_norm(double max_norm) {
  if (!s_.opts.expert_param) return nn::clip_grad_norm(s_.params, max_norm);
  // Experts: each rank of an ep group holds different ones; the rest is
  // the same on all of them, so it counts on ep rank 0 only.
  Communicator& ep = *s_.opts.expert_ep;
  std::vector<nn::GradPiece> pieces;
  for (nn::Parameter* p : s_.params)
    pieces.push_back({p->grad.f32(), p->size(), s_.opts.expert_param(*p) || ep.rank() == 0});
  return nn::clip_global_norm(pieces, max_norm, [&](double& ss) {
    s_.waited([&] { ep.all_reduce(&ss, &ss, 1, DType::kF64, ReduceOp::kSum); });
  });
}

void Replicated::optimizer_step(nn::Optimizer& opt, float lr) { opt.step(s_.params, lr); }

}  // namespace braid::parallel::dp
