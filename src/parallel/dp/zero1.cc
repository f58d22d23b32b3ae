// ZeRO stage 1: optimizer state sharded. Gradients are still all_reduce'd
// in full; each rank updates its chunk of every bucket and the updated
// chunks are all_gather'ed back in place.

#include "braid/kernels.h"
#include "parallel/dp/zero_policy.h"

namespace braid::parallel::dp {

double Zero1::clip_grad_norm(double max_norm) {
  // The chunks partition the buckets: their squares sum to the global norm.
  std::vector<nn::GradPiece> pieces;
  for (auto& b : s_.buckets) pieces.push_back({b->shard_grads_ptr(s_.rank), b->shard});
  return nn::clip_global_norm(pieces, max_norm, [&](double& ss) {
    if (s_.world > 1)
      s_.waited([&] { s_.comm->all_reduce(&ss, &ss, 1, DType::kF64, ReduceOp::kSum); });
  });
}

void Zero1::optimizer_step(nn::Optimizer& opt, float lr) {
  opt.step(s_.shard_params, lr);
  // Every bucket's gather starts now; the next forward waits for each one
  // only when it reaches the bucket's unit.
  for (auto& b : s_.buckets) gather_params(*b);
}

void Zero1::gather_params(Bucket& b) {
  if (b.gather_pending || s_.world == 1) return;  // one rank: its chunk is the bucket
  float* full = b.param.f32();
  b.gather_work = s_.comm->all_gather_async(full + int64_t(s_.rank) * b.shard, full,
                                            size_t(b.shard), DType::kF32);
  b.gather_pending = true;
}

}  // namespace braid::parallel::dp
