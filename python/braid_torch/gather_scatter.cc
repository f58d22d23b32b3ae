// The collectives of ProcessGroupBraid that move blocks between ranks:
// gathers, scatters, reduce-scatters and all-to-all.
#include <numeric>
#include <utility>

#include "braid/error.h"
#include "dtype_map.h"
#include "process_group.h"

namespace braid_torch {

using c10d::OpType;
using detail::dense;
using detail::flatten_same;
using detail::nbytes;
using detail::ptr;
using detail::require;
using detail::single;

namespace {
constexpr braid::DType kBytes = braid::DType::kU8;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  const at::Tensor& in = single(inputs, "allgather");
  require(outputs.size() == 1 && outputs[0].size() == size_t(size_), "allgather",
          "expected one list of " + std::to_string(size_) + " output tensors");
  std::vector<at::Tensor> outs = outputs[0];
  for (size_t i = 0; i < outs.size(); ++i) {
    check_cpu_tensor(outs[i], "allgather output " + std::to_string(i));
    require(outs[i].scalar_type() == in.scalar_type() && outs[i].numel() == in.numel(), "allgather",
            "output " + std::to_string(i) + " differs from the input in dtype or numel");
  }
  at::Tensor src = dense(in);
  at::Tensor flat = at::empty({int64_t(size_) * in.numel()}, in.options());
  auto w = comm_->all_gather_async(ptr(src), ptr(flat), nbytes(src), kBytes);
  return enqueue(OpType::ALLGATHER, {w}, [flat, outs] { detail::unflatten_into(flat, outs); },
                 {src, flat}, outs);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  const char* op = "allgather_coalesced";
  require(!inputs.empty(), op, "no input tensors given");
  require(outputs.size() == size_t(size_), op,
          "expected " + std::to_string(size_) + " output lists (one per rank), got " +
              std::to_string(outputs.size()));
  // The inputs' bytes, one after another: one all_gather moves them all.
  std::vector<int64_t> offset(inputs.size() + 1, 0);
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_cpu_tensor(inputs[i], std::string(op) + " input " + std::to_string(i));
    offset[i + 1] = offset[i] + int64_t(nbytes(inputs[i]));
  }
  for (int r = 0; r < size_; ++r) {
    require(outputs[r].size() == inputs.size(), op,
            "output list " + std::to_string(r) + " has " + std::to_string(outputs[r].size()) +
                " tensors for " + std::to_string(inputs.size()) + " inputs");
    for (size_t i = 0; i < inputs.size(); ++i) {
      const at::Tensor& o = outputs[r][i];
      check_cpu_tensor(o, std::string(op) + " output " + std::to_string(r) + "," + std::to_string(i));
      require(o.scalar_type() == inputs[i].scalar_type() && o.numel() == inputs[i].numel(), op,
              "output " + std::to_string(r) + "," + std::to_string(i) +
                  " differs from input " + std::to_string(i) + " in dtype or numel");
    }
  }
  const int64_t total = offset.back();
  at::Tensor send = at::empty({total}, at::kByte);
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].numel())
      send.narrow(0, offset[i], offset[i + 1] - offset[i])
          .copy_(dense(inputs[i]).reshape({-1}).view(at::kByte));
  at::Tensor recv = at::empty({int64_t(size_) * total}, at::kByte);
  auto w = comm_->all_gather_async(ptr(send), ptr(recv), size_t(total), kBytes);
  std::vector<std::vector<at::Tensor>> outs = outputs;
  std::vector<at::Tensor> flat_outs;
  for (const auto& l : outputs) flat_outs.insert(flat_outs.end(), l.begin(), l.end());
  auto finish = [recv, outs, offset, total] {
    for (size_t r = 0; r < outs.size(); ++r)
      for (size_t i = 0; i < outs[r].size(); ++i) {
        at::Tensor o = outs[r][i];
        if (!o.numel()) continue;
        // A fresh copy: the slice's byte offset may not suit o's dtype.
        at::Tensor bytes = recv.narrow(0, int64_t(r) * total + offset[i], offset[i + 1] - offset[i]).clone();
        o.copy_(bytes.view(o.scalar_type()).view(o.sizes()));
      }
  };
  return enqueue(OpType::ALLGATHER_COALESCED, {w}, finish, {send, recv}, flat_outs);
}

void ProcessGroupBraid::check_allgather_base(const at::Tensor& output, const at::Tensor& input,
                                             const char* op) const {
  check_cpu_tensor(input, std::string(op) + " input");
  check_cpu_tensor(output, std::string(op) + " output");
  require(output.scalar_type() == input.scalar_type() && output.numel() == size_ * input.numel(),
          op, "output must hold world_size x input's elements of its dtype");
}

Reduction ProcessGroupBraid::check_reduce_scatter_base(const at::Tensor& output,
                                                       const at::Tensor& input,
                                                       const c10d::ReduceOp& reduce_op,
                                                       const char* op) const {
  check_cpu_tensor(input, std::string(op) + " input");
  check_cpu_tensor(output, std::string(op) + " output");
  require(output.scalar_type() == input.scalar_type() && input.numel() == size_ * output.numel(),
          op, "input must hold world_size x output's elements of its dtype");
  return map_reduction(output.scalar_type(), reduce_op, op);
}

ProcessGroupBraid::Issued ProcessGroupBraid::issue_allgather_base(const at::Tensor& output,
                                                                   const at::Tensor& input,
                                                                   const char* op) {
  check_allgather_base(output, input, op);
  Issued is;
  at::Tensor src = dense(input), dst = detail::output_buffer(output, is.back);
  is.work = comm_->all_gather_async(ptr(src), ptr(dst), nbytes(src), kBytes);
  is.keep = {src, dst};
  return is;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::_allgather_base(at::Tensor& output,
                                                                  at::Tensor& input,
                                                                  const c10d::AllgatherOptions&) {
  std::vector<Issued> ops;
  ops.push_back(issue_allgather_base(output, input, "_allgather_base"));
  return enqueue_issued(OpType::_ALLGATHER_BASE, std::move(ops), {output});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::enqueue_issued(OpType type, std::vector<Issued> ops,
                                                                 std::vector<at::Tensor> outputs) {
  std::vector<braid::Work> works;
  std::vector<at::Tensor> keep;
  std::vector<std::function<void()>> backs;
  for (auto& is : ops) {
    works.push_back(is.work);
    keep.insert(keep.end(), is.keep.begin(), is.keep.end());
    if (is.back) backs.push_back(std::move(is.back));
  }
  std::function<void()> finish;
  if (backs.size() == 1)
    finish = std::move(backs[0]);
  else if (!backs.empty())
    finish = [backs = std::move(backs)] {
      for (auto& b : backs) b();
    };
  return enqueue(type, std::move(works), std::move(finish), std::move(keep), std::move(outputs));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  const at::Tensor& in = single(inputs, "gather");
  const int root = int(opts.rootRank);
  at::Tensor src = dense(in);
  at::Tensor flat;
  std::vector<at::Tensor> outs;
  if (rank_ == root) {
    require(outputs.size() == 1 && outputs[0].size() == size_t(size_), "gather",
            "the root needs one list of " + std::to_string(size_) + " output tensors");
    outs = outputs[0];
    for (size_t i = 0; i < outs.size(); ++i) {
      check_cpu_tensor(outs[i], "gather output " + std::to_string(i));
      require(outs[i].scalar_type() == in.scalar_type() && outs[i].numel() == in.numel(), "gather",
              "output " + std::to_string(i) + " differs from the input in dtype or numel");
    }
    flat = at::empty({int64_t(size_) * in.numel()}, in.options());
  } else {
    require(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()), "gather",
            "only the root (rank " + std::to_string(root) + ") passes output tensors");
  }
  auto w = comm_->gather_async(ptr(src), flat.defined() ? ptr(flat) : nullptr, nbytes(src), kBytes, root);
  std::function<void()> back;
  if (flat.defined()) back = [flat, outs] { detail::unflatten_into(flat, outs); };
  std::vector<at::Tensor> keep{src};
  if (flat.defined()) keep.push_back(flat);
  return enqueue(OpType::GATHER, {w}, back, keep, outs);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  const at::Tensor& out = single(outputs, "scatter");
  const int root = int(opts.rootRank);
  at::Tensor flat;
  if (rank_ == root) {
    require(inputs.size() == 1 && inputs[0].size() == size_t(size_), "scatter",
            "the root needs one list of " + std::to_string(size_) + " input tensors");
    flat = flatten_same(inputs[0], out, "scatter input");
  } else {
    require(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()), "scatter",
            "only the root (rank " + std::to_string(root) + ") passes input tensors");
  }
  std::function<void()> back;
  at::Tensor dst = detail::output_buffer(out, back);
  auto w = comm_->scatter_async(flat.defined() ? ptr(flat) : nullptr, ptr(dst), nbytes(dst), kBytes, root);
  std::vector<at::Tensor> keep{dst};
  if (flat.defined()) keep.push_back(flat);
  return enqueue(OpType::SCATTER, {w}, back, keep, outputs);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const at::Tensor& out = single(outputs, "reduce_scatter");
  require(inputs.size() == 1 && inputs[0].size() == size_t(size_), "reduce_scatter",
          "expected one list of " + std::to_string(size_) + " input tensors");
  Reduction r = map_reduction(out.scalar_type(), opts.reduceOp, "reduce_scatter");
  at::Tensor flat = flatten_same(inputs[0], out, "reduce_scatter input");
  std::function<void()> back;
  at::Tensor dst = detail::output_buffer(out, back);
  auto w = comm_->reduce_scatter_async(ptr(flat), ptr(dst), size_t(dst.numel()) * r.per_element,
                                       r.dtype, r.op);
  return enqueue(OpType::REDUCE_SCATTER, {w}, back, {flat, dst}, outputs);
}

ProcessGroupBraid::Issued ProcessGroupBraid::issue_reduce_scatter_base(
    const at::Tensor& output, const at::Tensor& input, const c10d::ReduceOp& reduce_op,
    const char* op) {
  Reduction r = check_reduce_scatter_base(output, input, reduce_op, op);
  Issued is;
  at::Tensor src = dense(input), dst = detail::output_buffer(output, is.back);
  is.work = comm_->reduce_scatter_async(ptr(src), ptr(dst), size_t(dst.numel()) * r.per_element,
                                        r.dtype, r.op);
  is.keep = {src, dst};
  return is;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  std::vector<Issued> ops;
  ops.push_back(issue_reduce_scatter_base(output, input, opts.reduceOp, "_reduce_scatter_base"));
  return enqueue_issued(OpType::_REDUCE_SCATTER_BASE, std::move(ops), {output});
}

#if BRAID_TORCH_2
c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions&) {
  require(outputs.size() == inputs.size(), "allgather_into_tensor_coalesced",
          std::to_string(outputs.size()) + " outputs for " + std::to_string(inputs.size()) + " inputs");
  // Every pair is checked before any is issued: a refused call issues nothing.
  for (size_t i = 0; i < inputs.size(); ++i)
    check_allgather_base(outputs[i], inputs[i], "allgather_into_tensor_coalesced");
  std::vector<Issued> ops;
  for (size_t i = 0; i < inputs.size(); ++i)
    ops.push_back(issue_allgather_base(outputs[i], inputs[i], "allgather_into_tensor_coalesced"));
  return enqueue_issued(OpType::ALLGATHER_INTO_TENSOR_COALESCED, std::move(ops), outputs);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  require(outputs.size() == inputs.size(), "reduce_scatter_tensor_coalesced",
          std::to_string(outputs.size()) + " outputs for " + std::to_string(inputs.size()) + " inputs");
  for (size_t i = 0; i < inputs.size(); ++i)
    check_reduce_scatter_base(outputs[i], inputs[i], opts.reduceOp, "reduce_scatter_tensor_coalesced");
  std::vector<Issued> ops;
  for (size_t i = 0; i < inputs.size(); ++i)
    ops.push_back(issue_reduce_scatter_base(outputs[i], inputs[i], opts.reduceOp,
                                            "reduce_scatter_tensor_coalesced"));
  return enqueue_issued(OpType::REDUCE_SCATTER_TENSOR_COALESCED, std::move(ops), outputs);
}
#endif

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::alltoallv_bytes(
    OpType type, const at::Tensor& in, const at::Tensor& out, const std::vector<size_t>& send_bytes,
    const std::vector<size_t>& recv_bytes, std::function<void()> finish,
    std::vector<at::Tensor> outputs) {
  std::vector<size_t> sd(size_), rd(size_);
  std::exclusive_scan(send_bytes.begin(), send_bytes.end(), sd.begin(), size_t(0));
  std::exclusive_scan(recv_bytes.begin(), recv_bytes.end(), rd.begin(), size_t(0));
  ++seq_;
  comm_->all_to_all_v(ptr(in), send_bytes, sd, ptr(out), recv_bytes, rd, kBytes);
  return finished(type, std::move(finish), std::move(outputs));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
    std::vector<int64_t>& input_splits, const c10d::AllToAllOptions&) {
  check_cpu_tensor(input, "alltoall_base input");
  check_cpu_tensor(output, "alltoall_base output");
  require(output.scalar_type() == input.scalar_type(), "alltoall_base",
          "input and output dtypes differ");
  at::Tensor src = dense(input);
  std::function<void()> back;
  at::Tensor dst = detail::output_buffer(output, back);
  if (output_splits.empty() && input_splits.empty()) {
    require(input.numel() == output.numel() && input.numel() % size_ == 0, "alltoall_base",
            "without split sizes, input and output need the same numel, a multiple of world_size");
    auto w = comm_->all_to_all_async(ptr(src), ptr(dst), nbytes(src) / size_, kBytes);
    return enqueue(OpType::ALLTOALL_BASE, {w}, back, {src, dst}, {output});
  }
  // Split sizes count rows (dim 0); a missing list means equal splits.
  auto bytes_per = [&](const at::Tensor& t, std::vector<int64_t>& splits, const char* which) {
    const int64_t rows = t.dim() ? t.size(0) : 1;
    const size_t row_bytes = rows ? nbytes(t) / size_t(rows) : 0;
    std::vector<size_t> b(size_);
    if (splits.empty()) {
      require(rows % size_ == 0, "alltoall_base",
              std::string(which) + " has no split sizes and its rows do not divide by world_size");
      for (auto& x : b) x = size_t(rows / size_) * row_bytes;
      return b;
    }
    require(splits.size() == size_t(size_), "alltoall_base",
            std::string(which) + "_split_sizes needs one entry per rank");
    int64_t sum = 0;
    for (int i = 0; i < size_; ++i) {
      require(splits[i] >= 0, "alltoall_base", std::string(which) + "_split_sizes has a negative entry");
      sum += splits[i];
      b[i] = size_t(splits[i]) * row_bytes;
    }
    require(sum == rows, "alltoall_base",
            std::string(which) + "_split_sizes add up to " + std::to_string(sum) + ", the tensor has " +
                std::to_string(rows) + " rows");
    return b;
  };
  auto sb = bytes_per(src, input_splits, "input");
  auto rb = bytes_per(dst, output_splits, "output");
  return alltoallv_bytes(OpType::ALLTOALL_BASE, src, dst, sb, rb, back, {output});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::alltoall(std::vector<at::Tensor>& outputs,
                                                           std::vector<at::Tensor>& inputs,
                                                           const c10d::AllToAllOptions&) {
  require(outputs.size() == size_t(size_) && inputs.size() == size_t(size_), "alltoall",
          "expected " + std::to_string(size_) + " input and output tensors");
  bool equal = true;
  std::vector<size_t> sb(size_), rb(size_);
  for (int i = 0; i < size_; ++i) {
    check_cpu_tensor(inputs[i], "alltoall input " + std::to_string(i));
    check_cpu_tensor(outputs[i], "alltoall output " + std::to_string(i));
    require(inputs[i].scalar_type() == inputs[0].scalar_type() &&
                outputs[i].scalar_type() == inputs[0].scalar_type(),
            "alltoall", "all input and output tensors must share a dtype");
    sb[i] = nbytes(inputs[i]);
    rb[i] = nbytes(outputs[i]);
    equal &= sb[i] == sb[0] && rb[i] == sb[0];
  }
  std::vector<at::Tensor> ins, outs = outputs;
  for (auto& t : inputs) ins.push_back(t.reshape({-1}));
  at::Tensor flat_in = at::cat(ins);
  int64_t out_numel = 0;
  for (auto& t : outputs) out_numel += t.numel();
  at::Tensor flat_out = at::empty({out_numel}, inputs[0].options());
  auto back = [flat_out, outs] { detail::unflatten_into(flat_out, outs); };
  if (equal) {
    auto w = comm_->all_to_all_async(ptr(flat_in), ptr(flat_out), sb[0], kBytes);
    return enqueue(OpType::ALLTOALL, {w}, back, {flat_in, flat_out}, outputs);
  }
  return alltoallv_bytes(OpType::ALLTOALL, flat_in, flat_out, sb, rb, back, outputs);
}

}  // namespace braid_torch
