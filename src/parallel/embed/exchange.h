// The all_to_all exchange of the sharded DLRM (braid/sharded_embeddings.h):
// what turns model-parallel table lookups into data-parallel batches and
// back. Private to src/parallel/embed.
//
// A "block" is one shard of one table (EmbeddingPlan); owned(r) lists rank
// r's blocks by feature. Each step's micro-batch, on every rank at once:
//   send_ids      every rank sends each block owner its ids of the block's
//                 feature, i32 [b, bag]; the owner reads ids(s, k): rank
//                 s's ids for its block k (batch(s) rows). Ranks may hold
//                 different b: the sizes are all_gathered first, unless the
//                 caller knows them all (`known`, one per rank; this rank's
//                 must be its b, else Error(kInvalidArgument));
//   return_pooled the owner has written pooled_out(s, k), [batch(s),
//                 cols_k], for every (s, k); each batch owner receives
//                 pooled_in(o, k), [b, cols of o's block k];
//   send_grads    the batch owner has written grad_out(o, k), its
//                 dL/dpooled columns of o's block k; the owner receives
//                 grad_in(s, k), [batch(s), cols_k]. Given the ids of this
//                 rank's NEXT forward (same batch sizes), they travel in
//                 the same all_to_all_v, and use_prefetched_ids() later
//                 makes them what ids(s, k) reads, in place of a
//                 send_ids: one collective fewer per micro-batch (the
//                 pipelining of TorchRec's sparse-distribution trainer).
// Each is one all_to_all_v on the communicator given (collective, in
// step on every rank). seconds() is the time spent in them since the last
// take_seconds().
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "braid/comm.h"
#include "braid/embedding_plan.h"
#include "braid/tensor.h"

namespace braid::parallel::embed {

struct Block {
  int64_t f = 0;
  TableShard shard;
};

class Exchange {
 public:
  Exchange(std::shared_ptr<Communicator> comm, const EmbeddingPlan& plan, int64_t bag);

  int rank() const { return rank_; }
  int world() const { return world_; }
  const std::vector<Block>& owned(int r) const { return owned_[size_t(r)]; }

  void send_ids(const std::vector<Tensor>& ids, const std::vector<int64_t>& known = {});
  int64_t batch(int s) const { return batch_[size_t(s)]; }
  const int32_t* ids(int s, size_t k) const;

  float* pooled_out(int s, size_t k);
  void return_pooled();
  const float* pooled_in(int o, size_t k) const;

  float* grad_out(int o, size_t k);
  void send_grads(const std::vector<Tensor>* next_ids = nullptr);
  // b: this rank's batch; known: every rank's (required).
  void use_prefetched_ids(int64_t b, const std::vector<int64_t>& known);
  const float* grad_in(int s, size_t k) const;

  double take_seconds();

 private:
  // Element offsets of a buffer exchanged with every peer: per peer its
  // count and displacement, per (peer, block) the block's offset.
  struct Layout {
    std::vector<size_t> counts, displs;
    std::vector<std::vector<size_t>> at;
    size_t total = 0;
  };
  // owner_side: peer p's part holds one [batch(p), width] piece per block
  // of this rank's; else one [batch(me), width] piece per block of p's.
  // width: the bag (ids) or the block's columns.
  Layout layout(bool owner_side, bool ids) const;
  // Every rank's batch size (known, else all_gathered) and the layouts
  // and buffers that follow from them.
  void set_sizes(int64_t b, const std::vector<int64_t>& known);
  void run(const void* send, const Layout& out, void* recv, const Layout& in, DType t);

  std::shared_ptr<Communicator> comm_;
  int rank_, world_;
  int64_t bag_;
  std::vector<std::vector<Block>> owned_;
  std::vector<int64_t> batch_;
  Layout ids_batch_, ids_owner_, cols_batch_, cols_owner_;
  void pack_ids(const std::vector<Tensor>& ids, int32_t* out) const;
  std::vector<int32_t> ids_out_, ids_in_, ids_next_in_, packed_out_, packed_in_;
  std::vector<float> pooled_out_, pooled_in_, grad_out_, grad_in_;
  double seconds_ = 0;
};

}  // namespace braid::parallel::embed
