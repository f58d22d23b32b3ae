// The communication operators of tensor parallelism, each a forward and a
// backward that are each other's adjoint: the backward of a sum over ranks
// is a copy, of a copy a sum; of a gather a slice, of a slice a gather.
// Collectives work on rank-major blocks; the block moves (blocks.h) put
// them in the tensor's own layout.
#include "braid/error.h"
#include "braid/tensor_parallel.h"
#include "parallel/tp/blocks.h"

namespace braid::parallel::tp {

namespace {
void all_reduce_into(Communicator& c, const Tensor& x, Tensor& y) {
  y.resize(x.shape(), DType::kF32);
  c.all_reduce(x.f32(), y.f32(), size_t(x.numel()), DType::kF32, ReduceOp::kSum);
}

// [outer, n·inner] from this rank's [outer, inner]: all_gather, then interleave.
void gather_interleaved(Communicator& c, const Tensor& x, Tensor& y, Tensor& scratch,
                        Shape out_shape, int64_t outer, int64_t inner) {
  const int64_t n = c.size();
  scratch.resize({n, x.numel()}, DType::kF32);
  c.all_gather(x.f32(), scratch.f32(), size_t(x.numel()), DType::kF32);
  y.resize(out_shape, DType::kF32);
  blocks_to_interleaved(scratch.f32(), y.f32(), n, outer, inner);
}

// This rank's [outer, inner] of [outer, n·inner].
void slice_interleaved(Communicator& c, const Tensor& x, Tensor& y, Shape out_shape,
                       int64_t outer, int64_t inner) {
  y.resize(out_shape, DType::kF32);
  take_block(x.f32(), y.f32(), c.size(), c.rank(), outer, inner);
}

// Summed [outer, inner] block of this rank from every rank's [outer, n·inner].
void reduce_scatter_interleaved(Communicator& c, const Tensor& x, Tensor& y, Tensor& scratch,
                                Shape out_shape, int64_t outer, int64_t inner) {
  const int64_t n = c.size();
  scratch.resize({x.numel()}, DType::kF32);
  interleaved_to_blocks(x.f32(), scratch.f32(), n, outer, inner);
  y.resize(out_shape, DType::kF32);
  c.reduce_scatter(scratch.f32(), y.f32(), size_t(outer * inner), DType::kF32, ReduceOp::kSum);
}

Shape with_dim(Shape s, int d, int64_t v) {
  s[size_t(d < 0 ? int(s.size()) + d : d)] = v;
  return s;
}

int64_t last_dim(const Tensor& x, const std::string& what) {
  if (x.ndim() < 1) throw Error(Errc::kInvalidArgument, what + ": input has no dimensions");
  return x.dim(-1);
}
int64_t rows_of(const Tensor& x) { return x.dim(-1) ? x.numel() / x.dim(-1) : 0; }
}  // namespace

const Tensor& CopyToTpRegion::forward(const Tensor& x, nn::Context&) { return x; }
const Tensor& CopyToTpRegion::backward(const Tensor& dy, nn::Context&) {
  all_reduce_into(*tp_, dy, dx_);
  return dx_;
}

const Tensor& ReduceFromTpRegion::forward(const Tensor& x, nn::Context&) {
  all_reduce_into(*tp_, x, y_);
  return y_;
}
const Tensor& ReduceFromTpRegion::backward(const Tensor& dy, nn::Context&) { return dy; }

const Tensor& ScatterToTpRegion::forward(const Tensor& x, nn::Context&) {
  int64_t c = divide(last_dim(x, name_), tp_->size(), name_ + ": last dimension");
  slice_interleaved(*tp_, x, y_, with_dim(x.shape(), -1, c), rows_of(x), c);
  return y_;
}
const Tensor& ScatterToTpRegion::backward(const Tensor& dy, nn::Context&) {
  int64_t c = last_dim(dy, name_);
  gather_interleaved(*tp_, dy, dx_, scratch_, with_dim(dy.shape(), -1, c * tp_->size()),
                     rows_of(dy), c);
  return dx_;
}

const Tensor& GatherFromTpRegion::forward(const Tensor& x, nn::Context&) {
  int64_t c = last_dim(x, name_);
  gather_interleaved(*tp_, x, y_, scratch_, with_dim(x.shape(), -1, c * tp_->size()),
                     rows_of(x), c);
  return y_;
}
const Tensor& GatherFromTpRegion::backward(const Tensor& dy, nn::Context&) {
  int64_t c = divide(last_dim(dy, name_), tp_->size(), name_ + ": last dimension");
  slice_interleaved(*tp_, dy, dx_, with_dim(dy.shape(), -1, c), rows_of(dy), c);
  return dx_;
}

const Tensor& ScatterToSequenceRegion::forward(const Tensor& x, nn::Context&) {
  SeqSplit s = seq_split(x, tp_->size(), name_, true);
  slice_interleaved(*tp_, x, y_, with_dim(x.shape(), 1, x.dim(1) / tp_->size()), s.outer,
                    s.inner);
  return y_;
}
const Tensor& ScatterToSequenceRegion::backward(const Tensor& dy, nn::Context&) {
  SeqSplit s = seq_split(dy, tp_->size(), name_, false);
  gather_interleaved(*tp_, dy, dx_, scratch_, with_dim(dy.shape(), 1, dy.dim(1) * tp_->size()),
                     s.outer, s.inner);
  return dx_;
}

const Tensor& GatherFromSequenceRegion::forward(const Tensor& x, nn::Context&) {
  SeqSplit s = seq_split(x, tp_->size(), name_, false);
  gather_interleaved(*tp_, x, y_, scratch_, with_dim(x.shape(), 1, x.dim(1) * tp_->size()),
                     s.outer, s.inner);
  return y_;
}
const Tensor& GatherFromSequenceRegion::backward(const Tensor& dy, nn::Context&) {
  SeqSplit s = seq_split(dy, tp_->size(), name_, true);
  reduce_scatter_interleaved(*tp_, dy, dx_, scratch_,
                             with_dim(dy.shape(), 1, dy.dim(1) / tp_->size()), s.outer, s.inner);
  return dx_;
}

const Tensor& ReduceScatterToSequenceRegion::forward(const Tensor& x, nn::Context&) {
  SeqSplit s = seq_split(x, tp_->size(), name_, true);
  reduce_scatter_interleaved(*tp_, x, y_, scratch_,
                             with_dim(x.shape(), 1, x.dim(1) / tp_->size()), s.outer, s.inner);
  return y_;
}
const Tensor& ReduceScatterToSequenceRegion::backward(const Tensor& dy, nn::Context&) {
  SeqSplit s = seq_split(dy, tp_->size(), name_, false);
  gather_interleaved(*tp_, dy, dx_, scratch_, with_dim(dy.shape(), 1, dy.dim(1) * tp_->size()),
                     s.outer, s.inner);
  return dx_;
}

}  // namespace braid::parallel::tp
