// A shard's parameters and optimizer state: the slice of every dense key
// this server owns and the sparse rows of its own it has touched, and the
// update rule that applies a mean gradient to them. Gradients arrive as
// Contributions (one worker's pushes of a round, or a sum of them). No
// lock of its own: its ShardState's mutex guards it (shard_state.h).
// Private to src/ps.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "braid/ps.h"
#include "ps/io/reply_buf.h"
#include "ps/io/wire.h"

namespace braid::ps {

// One sparse key's gradients: rows in arrival order (a row may repeat),
// `width` floats each in `g`. Flat, so a push of n rows costs a few
// allocations, not 2n.
struct SparseGrad {
  std::vector<int64_t> rows;
  std::vector<float> g;
};

// One contribution: gradients by key (dense: the slice; sparse: by row).
struct Contribution {
  std::map<KeyId, std::vector<float>> dense;
  std::map<KeyId, SparseGrad> sparse;
  bool empty() const { return dense.empty() && sparse.empty(); }
};

class ParamStore {
 public:
  struct Dense {
    int64_t begin = 0, end = 0;  // the slice [begin, end) of the key
    std::vector<float> w, state;
    int64_t t = 0;
  };
  struct Sparse {
    std::unordered_map<int64_t, size_t> index;  // row -> position
    std::vector<float> w, state;                // by position
    int64_t t = 0;
  };

  // Shard `shard` of `layout`: dense slices from `init` (every key's full
  // values; empty for sparse keys), sparse rows from `init_sparse` (zero
  // when unset) as they are first touched. Throws kInvalidArgument for
  // initial values of the wrong shape.
  ParamStore(const Layout& layout, int shard, const UpdateRule& rule,
             const std::vector<std::vector<float>>& init,
             std::function<void(KeyId, int64_t, float*)> init_sparse);

  const Layout& layout() const { return layout_; }
  int shard() const { return shard_; }
  const UpdateRule& rule() const { return rule_; }
  Dense& dense(KeyId k) { return dense_[k]; }
  const Dense& dense(KeyId k) const { return dense_[k]; }
  Sparse& sparse(KeyId k) { return sparse_[k]; }
  const Sparse& sparse(KeyId k) const { return sparse_[k]; }
  // Sparse row `row`'s position in key k, created on first touch.
  size_t row(KeyId k, int64_t row);
  // Optimizer steps applied (checkpoints keep the count).
  int64_t updates_applied = 0;

  // Adds push frame h's gradient to `c` (dense: into the slice; sparse: the
  // rows, each checked to be this shard's).
  void add_push(Contribution& c, const wire::Header& h, const uint8_t* payload) const;
  // The element-wise sum of `parts` in their order, each sparse row once,
  // independent of the order rows arrived in (param_store.cc).
  Contribution summed(const std::vector<const Contribution*>& parts) const;
  // Applies sum / contributors as one optimizer step with rate lr.
  void apply(const Contribution& sum, int contributors, float lr);
  // Appends pull frame h's values to `out`: the dense range, or the rows
  // its payload names (each checked to be this shard's).
  void read(const wire::Header& h, const uint8_t* payload, ReplyBuf& out);

 private:
  const Layout layout_;
  const int shard_;
  const UpdateRule rule_;
  std::function<void(KeyId, int64_t, float*)> init_sparse_;
  std::vector<Dense> dense_;
  std::vector<Sparse> sparse_;
};

}  // namespace braid::ps
