// ProcessGroupBraid: torch.distributed's backend "braid" over one
// braid::Communicator: on torch 1.x the process group itself, on torch 2.x
// the c10d::Backend that torch's process group dispatches CPU tensors to
// (torch_api.h).
//
// Rendezvous: the communicator is built from the c10d store the group is
// given (adapt_store), under the key prefix "braid/". The job secret that
// braid's TCP handshakes prove: BRAID_SECRET when every rank has it in its
// environment (`braid run` sets it); otherwise rank 0 draws a fresh one
// (braid::make_job_secret) and publishes it in the c10d store under
// "braid_torch/secret", where the other ranks read it. The secret is then
// as private as the c10d store itself, which torch.distributed does not
// authenticate: anyone who can reach that store can join the job anyway.
//
// Every operation is issued on the calling thread (the order every rank
// must match) and returns at once with a BraidWork; collectives complete in
// issue order, send/recv on a queue of their own (braid keeps them apart),
// each with its Completer (which sees only the works work.h says need it).
// Tensors that are not contiguous, and lists of
// tensors, are staged through one contiguous buffer and copied back when
// the operation completes.
// The first group of a process may lower its compute threads when several
// ranks share the host and no thread variable is set (threads.h).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "braid/comm.h"
#include "dtype_map.h"
#include "torch_api.h"
#include "work.h"

namespace braid_torch {

class ProcessGroupBraid : public BackendBase {
 public:
  ProcessGroupBraid(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                    std::chrono::milliseconds timeout);
  ~ProcessGroupBraid() override;

  const std::string getBackendName() const override { return "braid"; }
  braid::Communicator& communicator() { return *comm_; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
#if BRAID_TORCH_2
  // torch 2.x's entry for sparse tensors (torch 2.x sends a CPU sparse
  // tensor to allreduce() too; both end in allreduce_sparse_coo).
  c10::intrusive_ptr<c10d::Work> allreduce_sparse(std::vector<at::Tensor>& tensors,
                                                  const c10d::AllreduceOptions& opts) override {
    return allreduce_sparse_coo(tensors, opts);
  }
#endif
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
#if BRAID_TORCH_2
  // One braid operation per (output, input) pair, in order, under one work.
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
#endif
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  // Every input of every rank, gathered: outputs[r][i] gets rank r's
  // inputs[i] (shapes and dtypes must match; one braid all_gather of bytes).
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  // monitoredBarrier: every rank checks in with rank 0 (a send on tag INT32_MAX,
  // which send/recv refuse) and waits for its answer, within opts.timeout (the
  // group's when unset). Rank 0 throws naming the first rank that did not
  // check in in time ("Rank r failed to pass monitoredBarrier in t ms"), or
  // every such rank when wait_all_ranks, or itself when its time ran out
  // before it could wait for a rank ("Rank 0 timed out in monitoredBarrier"); a rank that gets no answer throws
  // too. A late rank's message is still pending on the communicator after
  // that: like a timed-out collective, the group should not be used again.
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;
  // Sequence numbers: the collectives this group has issued (send/recv not
  // counted), the same on every rank whose calls match. They start at 0 on
  // every rank, so there is nothing to agree on: set... does nothing.
  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override { return seq_.load(); }

 private:
  // all_reduce (SUM) of one sparse COO tensor, blocking: sparse.cc. The
  // work returned is done.
  c10::intrusive_ptr<c10d::Work> allreduce_sparse_coo(std::vector<at::Tensor>& tensors,
                                                      const c10d::AllreduceOptions& opts);
  // A BraidWork for an operation that already ran here, blocking: `finish`
  // run, its future marked with `outputs`.
  c10::intrusive_ptr<c10d::Work> finished(c10d::OpType type, std::function<void()> finish,
                                          std::vector<at::Tensor> outputs);
  // recv (src >= 0) and recvAnysource (src -1).
  c10::intrusive_ptr<c10d::Work> receive(std::vector<at::Tensor>& tensors, int src, int tag);
  // Wraps the issued braid operations in a BraidWork and queues it.
  c10::intrusive_ptr<c10d::Work> enqueue(c10d::OpType type, std::vector<braid::Work> works,
                                         std::function<void()> finish,
                                         std::vector<at::Tensor> keep,
                                         std::vector<at::Tensor> outputs, bool p2p = false);
  // One issued braid operation: its handle, the buffers it uses, and the
  // copy into the caller's output when that is staged (else empty).
  struct Issued {
    braid::Work work;
    std::vector<at::Tensor> keep;
    std::function<void()> back;
  };
  // Check one _allgather_base / _reduce_scatter_base (throwing
  // braid::Error naming `op`), and check and issue one.
  void check_allgather_base(const at::Tensor& output, const at::Tensor& input, const char* op) const;
  Reduction check_reduce_scatter_base(const at::Tensor& output, const at::Tensor& input,
                                      const c10d::ReduceOp& reduce_op, const char* op) const;
  Issued issue_allgather_base(const at::Tensor& output, const at::Tensor& input, const char* op);
  Issued issue_reduce_scatter_base(const at::Tensor& output, const at::Tensor& input,
                                   const c10d::ReduceOp& reduce_op, const char* op);
  // enqueue() over several issued operations.
  c10::intrusive_ptr<c10d::Work> enqueue_issued(c10d::OpType type, std::vector<Issued> ops,
                                                std::vector<at::Tensor> outputs);
  // all_to_all with per-peer byte counts (braid has no _async form of
  // all_to_all_v: it runs here, blocking, and the work returned is done).
  c10::intrusive_ptr<c10d::Work> alltoallv_bytes(c10d::OpType type, const at::Tensor& in,
                                                 const at::Tensor& out,
                                                 const std::vector<size_t>& send_bytes,
                                                 const std::vector<size_t>& recv_bytes,
                                                 std::function<void()> finish,
                                                 std::vector<at::Tensor> outputs);

  std::chrono::milliseconds timeout_;
  std::atomic<uint64_t> seq_{0};
  // monitoredBarrier's receive buffers: a receive that timed out may still
  // complete into one, so they live as long as the group.
  std::vector<std::shared_ptr<std::vector<uint8_t>>> monitor_buffers_;
  std::shared_ptr<braid::Communicator> comm_;
  // Declared after comm_: destroyed first, so every queued work has ended
  // before the communicator goes.
  // Shared with the works, which hold them weakly (a work may outlive its
  // group): only the group owns them, so they are never destroyed on their
  // own thread.
  std::shared_ptr<Completer> collectives_;
  std::shared_ptr<Completer> p2p_;
};

// Helpers shared by the two files of operations.
namespace detail {
// t itself when contiguous, else a contiguous copy.
at::Tensor dense(const at::Tensor& t);
// A contiguous buffer the operation writes `out` through: `out` itself, or
// a fresh one, and then `back` copies it into `out` on completion.
at::Tensor output_buffer(const at::Tensor& out, std::function<void()>& back);
// Data pointer usable for a zero-length operation too.
void* ptr(const at::Tensor& t);
size_t nbytes(const at::Tensor& t);
// One contiguous 1-D tensor holding `ts` in order (all of `like`'s dtype and
// numel); throws naming `what` when one differs.
at::Tensor flatten_same(const std::vector<at::Tensor>& ts, const at::Tensor& like, const std::string& what);
// Copies consecutive numel-sized pieces of `flat` into `outs`.
void unflatten_into(const at::Tensor& flat, const std::vector<at::Tensor>& outs);
// Throws braid::Error(kInvalidArgument) "braid_torch <op>: <msg>" when !cond.
void require(bool cond, const char* op, const std::string& msg);
// The one tensor of a single-device call.
const at::Tensor& single(const std::vector<at::Tensor>& ts, const char* op);
}  // namespace detail

}  // namespace braid_torch
