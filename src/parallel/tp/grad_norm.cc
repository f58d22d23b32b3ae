// Gradient clipping for a tensor-parallel model: the global norm counts
// every element of the full model once, whichever rank holds it.
#include <cmath>

#include "braid/kernels.h"
#include "braid/tensor_parallel.h"

namespace braid::parallel::tp {

double clip_grad_norm(const std::vector<Sharded>& params, double max_norm, Communicator& tp) {
  // Shards: each rank adds its own. Replicated: every rank holds the same
  // gradient, so only rank 0 of the group adds it.
  double sq = 0;
  for (const Sharded& s : params)
    if (s.spec.dim >= 0 || tp.rank() == 0) sq += sum_squares(s.param->grad.f32(), s.param->size());
  tp.all_reduce(&sq, &sq, 1, DType::kF64, ReduceOp::kSum);
  const double norm = std::sqrt(sq);
  for (const Sharded& s : params) nn::clip_to_norm(s.param->grad.f32(), s.param->size(), norm, max_norm);
  return norm;
}

}  // namespace braid::parallel::tp
