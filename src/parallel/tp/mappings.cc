// The communication operators of tensor parallelism, each a forward and a
// backward that are each other's adjoint: the backward of a sum over ranks
// is a copy, of a copy a sum; of a gather a slice, of a slice a gather.
// Collectives work on rank-major blocks; the block moves (blocks.h) put
// them in the tensor's own layout.
#include "braid/error.h"
#include "braid/tp_mappings.h"
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

// The group's blocks along x's last dimension gathered: [.., d] → [.., n·d].
void gather_last(Communicator& c, const Tensor& x, Tensor& y, Tensor& scratch,
                 const std::string& what) {
  int64_t d = last_dim(x, what);
  gather_interleaved(c, x, y, scratch, with_dim(x.shape(), -1, d * c.size()), rows_of(x), d);
}
// This rank's block of x's last dimension: [.., n·d] → [.., d].
void slice_last(Communicator& c, const Tensor& x, Tensor& y, const std::string& what) {
  int64_t d = divide(last_dim(x, what), c.size(), what + ": last dimension");
  slice_interleaved(c, x, y, with_dim(x.shape(), -1, d), rows_of(x), d);
}

// Along the sequence (dimension 1 of [B, T, ...]): [B, T/n, ..] → [B, T, ..].
void gather_seq(Communicator& c, const Tensor& x, Tensor& y, Tensor& scratch,
                const std::string& what) {
  SeqSplit s = seq_split(x, c.size(), what, false);
  gather_interleaved(c, x, y, scratch, with_dim(x.shape(), 1, x.dim(1) * c.size()), s.outer,
                     s.inner);
}
// [B, T, ..] → this rank's [B, T/n, ..].
void slice_seq(Communicator& c, const Tensor& x, Tensor& y, const std::string& what) {
  SeqSplit s = seq_split(x, c.size(), what, true);
  slice_interleaved(c, x, y, with_dim(x.shape(), 1, x.dim(1) / c.size()), s.outer, s.inner);
}
// Every rank's [B, T, ..] summed, this rank's [B, T/n, ..] kept.
void reduce_scatter_seq(Communicator& c, const Tensor& x, Tensor& y, Tensor& scratch,
                        const std::string& what) {
  SeqSplit s = seq_split(x, c.size(), what, true);
  reduce_scatter_interleaved(c, x, y, scratch, with_dim(x.shape(), 1, x.dim(1) / c.size()),
                             s.outer, s.inner);
}
}  // namespace

// A sum over a group of one is its input: no buffer, no copy (a pipeline
// or data-parallel model built from a ModelSpec has tp groups of one).
const Tensor& CopyToTpRegion::forward(const Tensor& x, nn::Context&) { return x; }
const Tensor& CopyToTpRegion::backward(const Tensor& dy, nn::Context&) {
  if (tp_->size() == 1) return dy;
  all_reduce_into(*tp_, dy, dx_);
  return dx_;
}

const Tensor& ReduceFromTpRegion::forward(const Tensor& x, nn::Context&) {
  if (tp_->size() == 1) return x;
  all_reduce_into(*tp_, x, y_);
  return y_;
}
const Tensor& ReduceFromTpRegion::backward(const Tensor& dy, nn::Context&) { return dy; }

const Tensor& ScatterToTpRegion::forward(const Tensor& x, nn::Context&) {
  slice_last(*tp_, x, y_, name_);
  return y_;
}
const Tensor& ScatterToTpRegion::backward(const Tensor& dy, nn::Context&) {
  gather_last(*tp_, dy, dx_, scratch_, name_);
  return dx_;
}

const Tensor& GatherFromTpRegion::forward(const Tensor& x, nn::Context&) {
  gather_last(*tp_, x, y_, scratch_, name_);
  return y_;
}
const Tensor& GatherFromTpRegion::backward(const Tensor& dy, nn::Context&) {
  slice_last(*tp_, dy, dx_, name_);
  return dx_;
}

const Tensor& ScatterToSequenceRegion::forward(const Tensor& x, nn::Context&) {
  slice_seq(*tp_, x, y_, name_);
  return y_;
}
const Tensor& ScatterToSequenceRegion::backward(const Tensor& dy, nn::Context&) {
  gather_seq(*tp_, dy, dx_, scratch_, name_);
  return dx_;
}

const Tensor& GatherFromSequenceRegion::forward(const Tensor& x, nn::Context&) {
  gather_seq(*tp_, x, y_, scratch_, name_);
  return y_;
}
const Tensor& GatherFromSequenceRegion::backward(const Tensor& dy, nn::Context&) {
  reduce_scatter_seq(*tp_, dy, dx_, scratch_, name_);
  return dx_;
}

const Tensor& ReduceScatterToSequenceRegion::forward(const Tensor& x, nn::Context&) {
  reduce_scatter_seq(*tp_, x, y_, scratch_, name_);
  return y_;
}
const Tensor& ReduceScatterToSequenceRegion::backward(const Tensor& dy, nn::Context&) {
  gather_seq(*tp_, dy, dx_, scratch_, name_);
  return dx_;
}

}  // namespace braid::parallel::tp
