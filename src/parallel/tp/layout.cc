// Where each rank's piece of a split tensor lives: the block moves shared
// by the communication operators, and the slicing and gathering of
// parameter shards, and the sum of sequence parallelism's partial
// gradients.
#include <algorithm>
#include <cstring>

#include "braid/error.h"
#include "braid/tp_mappings.h"
#include "braid/tp_shard.h"
#include "parallel/tp/blocks.h"

namespace braid::parallel::tp {

int64_t divide(int64_t size, int64_t parts, const std::string& what) {
  BRAID_CHECK_ARG(parts >= 1, "tensor parallel: group size " + std::to_string(parts));
  if (size % parts != 0)
    throw Error(Errc::kInvalidArgument, what + " " + std::to_string(size) +
                                            " is not divisible by the tensor-parallel size " +
                                            std::to_string(parts));
  return size / parts;
}

void blocks_to_interleaved(const float* src, float* dst, int64_t n, int64_t outer,
                           int64_t inner) {
  for (int64_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(dst + (o * n + r) * inner, src + (r * outer + o) * inner,
                  size_t(inner) * sizeof(float));
}

void interleaved_to_blocks(const float* src, float* dst, int64_t n, int64_t outer,
                           int64_t inner) {
  for (int64_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(dst + (r * outer + o) * inner, src + (o * n + r) * inner,
                  size_t(inner) * sizeof(float));
}

void take_block(const float* src, float* dst, int64_t n, int64_t r, int64_t outer,
                int64_t inner) {
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(dst + o * inner, src + (o * n + r) * inner, size_t(inner) * sizeof(float));
}

SeqSplit seq_split(const Tensor& x, int64_t n, const std::string& what, bool gathered) {
  if (x.ndim() < 2)
    throw Error(Errc::kInvalidArgument,
                what + ": input " + shape_str(x.shape()) + " has no sequence dimension [B, T, ...]");
  const int64_t bt = x.dim(0) * x.dim(1);
  const int64_t per_pos = bt ? x.numel() / bt : 0;
  int64_t t_local = gathered ? divide(x.dim(1), n, what + ": sequence length") : x.dim(1);
  return {x.dim(0), t_local * per_pos};
}

namespace {
// The full tensor as [outer, parts · n, inner]: a shard is [outer, parts, inner].
struct Split {
  int64_t outer = 1, blocks = 1, inner = 1;
};
Split split_of(const Shape& full, const ShardSpec& spec, int size) {
  BRAID_CHECK_ARG(spec.dim >= 0 && spec.dim < int(full.size()),
                  "shard: split dim " + std::to_string(spec.dim) + " outside " + shape_str(full));
  Split s;
  for (int d = 0; d < spec.dim; ++d) s.outer *= full[size_t(d)];
  for (size_t d = size_t(spec.dim) + 1; d < full.size(); ++d) s.inner *= full[d];
  int64_t per = divide(full[size_t(spec.dim)], int64_t(spec.parts) * size,
                       "shard: dim " + std::to_string(spec.dim) + " of " + shape_str(full) +
                           " (in " + std::to_string(spec.parts) + " parts)");
  s.blocks = spec.parts;
  s.inner *= per;
  return s;
}
Shape shard_shape(const Shape& full, const ShardSpec& spec, int size) {
  Shape s = full;
  if (spec.dim >= 0) s[size_t(spec.dim)] /= size;
  return s;
}
}  // namespace

Tensor slice_shard(const Tensor& full, const ShardSpec& spec, int rank, int size) {
  if (spec.dim < 0) return full;
  Split s = split_of(full.shape(), spec, size);
  Tensor out(shard_shape(full.shape(), spec, size));
  take_block(full.f32(), out.f32(), size, rank, s.outer * s.blocks, s.inner);
  return out;
}

Tensor gather_shards(const Tensor& shard, const ShardSpec& spec, const Shape& full,
                     Communicator& tp) {
  if (spec.dim < 0) return shard;
  const int n = tp.size();
  shard.check_shape(shard_shape(full, spec, n), "gather_shards: shard");
  Split s = split_of(full, spec, n);
  Tensor blocks({n, shard.numel()});
  tp.all_gather(shard.f32(), blocks.f32(), size_t(shard.numel()), DType::kF32);
  Tensor out(full);
  blocks_to_interleaved(blocks.f32(), out.f32(), n, s.outer * s.blocks, s.inner);
  return out;
}

void reduce_partial_grads(const std::vector<Sharded>& params, Communicator& tp, Tensor& scratch) {
  int64_t total = 0;
  for (const Sharded& s : params)
    if (s.spec.partial_grad) total += s.param->size();
  if (total == 0) return;
  scratch.resize({total}, DType::kF32);
  float* buf = scratch.f32();
  int64_t at = 0;
  for (const Sharded& s : params)
    if (s.spec.partial_grad) {
      std::copy_n(s.param->grad.f32(), s.param->size(), buf + at);
      at += s.param->size();
    }
  tp.all_reduce(buf, buf, size_t(total), DType::kF32, ReduceOp::kSum);
  at = 0;
  for (const Sharded& s : params)
    if (s.spec.partial_grad) {
      std::copy_n(buf + at, s.param->size(), s.param->grad.f32());
      at += s.param->size();
    }
}

}  // namespace braid::parallel::tp
