// all_reduce of a sparse COO tensor (what DDP issues for the gradients of
// an nn.Embedding(sparse=True), and dist.all_reduce of a sparse tensor):
// the sum of every rank's tensor, as a coalesced sparse tensor, written
// into the caller's tensor on every rank.
//
// Three exchanges, blocking on the calling thread (the counts are needed
// before the rest can be sized):
//   1. a fixed header per rank (nnz, sparse and total dimensions, dtype,
//      sizes), all-gathered: every rank checks that all tensors agree in
//      everything but nnz, and names the first rank that differs;
//   2. each rank's indices, as nnz rows of sparse_dim int64s, and
//   3. its values, as nnz rows of the dense part, both as one all_to_all_v
//      in which a rank sends the same block to every peer (an all-gather
//      of varying sizes, no padding).
// Every rank then holds the same concatenation, in rank order, and
// coalesces it (duplicate indices summed), so every rank's result is
// bit-equal. Only SUM is defined for sparse tensors (as gloo: the other
// reductions would have to treat a missing entry as an operand).
#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "braid/error.h"
#include "dtype_map.h"
#include "process_group.h"

namespace braid_torch {

using detail::ptr;
using detail::require;

namespace {

constexpr braid::DType kBytes = braid::DType::kU8;
constexpr int64_t kMaxDims = 16;
// nnz, sparse_dim, dim, dtype, then dim sizes.
constexpr int64_t kHeader = 4 + kMaxDims;

std::string sizes_text(const int64_t* h) {
  std::string s = "[";
  for (int64_t d = 0; d < h[2]; ++d) s += (d ? ", " : "") + std::to_string(h[4 + d]);
  return s + "]";
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::allreduce_sparse_coo(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  require(tensors.size() == 1, "allreduce",
          "expected one tensor per call (one CPU device), got " + std::to_string(tensors.size()));
  at::Tensor& t = tensors[0];
  require(t.layout() == at::kSparse, "allreduce",
          "a sparse tensor must be in COO layout (got " + std::string(c10::toString(t.layout())) + ")");
  require(t.device().is_cpu(), "allreduce",
          "the tensor is on " + t.device().str() + "; the braid backend handles CPU tensors only");
  require(opts.reduceOp == c10d::ReduceOp::SUM, "allreduce",
          "a sparse tensor reduces with SUM only (a missing entry would be an operand of the others)");
  require(t.dim() <= kMaxDims, "allreduce",
          "a sparse tensor of " + std::to_string(t.dim()) + " dimensions (at most " +
              std::to_string(kMaxDims) + ")");
  const at::Tensor in = t.coalesce();
  const int64_t nnz = in._nnz();
  const int64_t sparse_dim = in.sparse_dim();

  std::vector<int64_t> mine(kHeader, 0), all(size_t(kHeader) * size_);
  mine[0] = nnz;
  mine[1] = sparse_dim;
  mine[2] = in.dim();
  mine[3] = int64_t(in.scalar_type());
  for (int64_t d = 0; d < in.dim(); ++d) mine[4 + d] = in.size(d);
  ++seq_;
  comm_->all_gather(mine.data(), all.data(), sizeof(int64_t) * kHeader, kBytes);
  const int64_t* me = mine.data();
  for (int r = 0; r < size_; ++r) {
    const int64_t* h = all.data() + size_t(r) * kHeader;
    const bool same = std::equal(h + 1, h + kHeader, me + 1);
    if (!same)
      throw braid::Error(
          braid::Errc::kMismatch,
          "braid_torch allreduce: rank " + std::to_string(rank_) + "'s sparse tensor is " +
              c10::toString(in.scalar_type()) + sizes_text(me) + " with " +
              std::to_string(sparse_dim) + " sparse dimensions, rank " + std::to_string(r) +
              "'s is " + c10::toString(c10::ScalarType(h[3])) + sizes_text(h) + " with " +
              std::to_string(h[1]) + ": every rank's must agree in all but their entries");
  }

  std::vector<int64_t> counts(size_);
  for (int r = 0; r < size_; ++r) counts[r] = all[size_t(r) * kHeader];
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t(0));

  // Each rank's block, sent whole to every rank (itself included).
  auto gather_rows = [&](const at::Tensor& rows, at::Tensor out) {
    size_t per_row = size_t(out.element_size());
    for (int64_t d = 1; d < out.dim(); ++d) per_row *= size_t(out.size(d));
    std::vector<size_t> send(size_, size_t(rows.nbytes())), sd(size_, 0), recv(size_), rd(size_);
    for (int r = 0; r < size_; ++r) recv[r] = size_t(counts[r]) * per_row;
    std::exclusive_scan(recv.begin(), recv.end(), rd.begin(), size_t(0));
    comm_->all_to_all_v(ptr(rows), send, sd, ptr(out), recv, rd, kBytes);
    return out;
  };
  const at::Tensor idx_rows = in.indices().t().contiguous();  // [nnz, sparse_dim]
  const at::Tensor val_rows = in.values().contiguous();       // [nnz, dense sizes...]
  std::vector<int64_t> val_shape = val_rows.sizes().vec();
  val_shape[0] = total;
  at::Tensor idx_all = gather_rows(idx_rows, at::empty({total, sparse_dim}, idx_rows.options()));
  at::Tensor val_all = gather_rows(val_rows, at::empty(val_shape, val_rows.options()));
  at::Tensor sum = at::sparse_coo_tensor(idx_all.t(), val_all, in.sizes(), in.options()).coalesce();
  t.copy_(sum);
  return finished(c10d::OpType::ALLREDUCE, nullptr, tensors);
}

}  // namespace braid_torch
