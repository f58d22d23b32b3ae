// ShardedTables: this rank's table shards, their lookups and sparse
// gradients over the exchange, and their row-wise updates
// (include/braid/sharded_embeddings.h).
#include "braid/sharded_embeddings.h"

#include <algorithm>
#include <cstring>

#include "braid/checkpoint.h"
#include "braid/error.h"
#include "exchange.h"

namespace braid::parallel {

struct ShardedTables::Shard {
  int64_t f = 0;
  TableShard s;
  TableSharding kind = TableSharding::kTable;
  std::vector<float> w;    // [rows, cols]
  std::vector<float> sum;  // adagrad: per row
  nn::RowGrads grads;      // keyed by local row
  explicit Shard(int64_t cols) : grads(cols) {}
};

namespace {
// 1 for a sum; 1 / real ids for a mean (0 for a bag of padding).
float bag_weight(const int32_t* ids, int64_t bag, nn::EmbeddingBag::Mode mode) {
  if (mode == nn::EmbeddingBag::Mode::kSum) return 1.0f;
  int64_t n = 0;
  for (int64_t j = 0; j < bag; ++j) n += ids[j] >= 0;
  return n > 0 ? 1.0f / float(n) : 0.0f;
}

std::string table_name(int64_t f) { return "emb." + std::to_string(f) + ".weight"; }
std::string state_name(int64_t f) {
  return "optim/" + table_name(f) + "/" + nn::RowOptimizer::kStateSlot;
}
}  // namespace

ShardedTables::ShardedTables(std::shared_ptr<Communicator> comm, const nn::DlrmConfig& cfg,
                             uint64_t seed, EmbeddingPlan plan, nn::RowOptimizer opt)
    : comm_(std::move(comm)), cfg_(cfg), plan_(std::move(plan)), opt_(opt) {
  BRAID_CHECK_ARG(int64_t(plan_.tables.size()) == cfg_.features(),
                  "ShardedTables: the plan has " + std::to_string(plan_.tables.size()) +
                      " tables, the model " + std::to_string(cfg_.features()));
  ex_ = std::make_unique<embed::Exchange>(comm_, plan_, cfg_.bag);
  for (const embed::Block& b : ex_->owned(comm_->rank())) {
    Shard sh(b.shard.cols());
    sh.f = b.f;
    sh.s = b.shard;
    sh.kind = plan_.tables[size_t(b.f)].kind;
    sh.w.resize(size_t(b.shard.rows() * b.shard.cols()));
    nn::dlrm_table_init(cfg_, seed, b.f, b.shard.row_begin, b.shard.row_end, b.shard.col_begin,
                        b.shard.col_end, sh.w.data());
    if (opt_.has_state()) sh.sum.assign(size_t(b.shard.rows()), 0.0f);
    shards_.push_back(std::move(sh));
  }
  out_.resize(size_t(cfg_.features()));
}

ShardedTables::~ShardedTables() = default;

int64_t ShardedTables::table_bytes() const {
  int64_t b = 0;
  for (const Shard& sh : shards_) b += int64_t(sh.w.size()) * 4;
  return b;
}

int64_t ShardedTables::state_bytes() const {
  int64_t b = 0;
  for (const Shard& sh : shards_) b += int64_t(sh.sum.size()) * 4;
  return b;
}

double ShardedTables::take_exchange_seconds() { return ex_->take_seconds(); }

void ShardedTables::pool(int s, size_t k) {
  const Shard& sh = shards_[k];
  const int64_t bag = cfg_.bag, cols = sh.s.cols(), n = ex_->batch(s);
  const int32_t* ids = ex_->ids(s, k);
  float* out = ex_->pooled_out(s, k);
  std::memset(out, 0, size_t(n * cols) * 4);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t* bi = ids + i * bag;
    const float wt = bag_weight(bi, bag, cfg_.mode);
    float* o = out + i * cols;
    for (int64_t j = 0; j < bag; ++j) {
      if (bi[j] < sh.s.row_begin || bi[j] >= sh.s.row_end) continue;  // padding or not ours
      const float* e = sh.w.data() + (bi[j] - sh.s.row_begin) * cols;
      for (int64_t c = 0; c < cols; ++c) o[c] += wt * e[c];
    }
  }
}

void ShardedTables::forward(const std::vector<Tensor>& ids, std::vector<const Tensor*>& pooled,
                            nn::Context& ctx) {
  const int64_t F = cfg_.features(), dim = cfg_.dim;
  BRAID_CHECK_ARG(int64_t(ids.size()) == F, "ShardedTables: ids of " +
                                                std::to_string(ids.size()) + " features for " +
                                                std::to_string(F) + " tables");
  const int64_t b = ids.front().dim(0);
  for (int64_t f = 0; f < F; ++f) {
    const Tensor& t = ids[size_t(f)];
    for (int64_t i = 0; i < t.numel(); ++i)
      if (t.i32()[i] < -1 || t.i32()[i] >= cfg_.rows[size_t(f)])
        throw Error(Errc::kInvalidArgument,
                    "sharded embeddings: feature " + std::to_string(f) + " holds id " +
                        std::to_string(t.i32()[i]) + " outside [0, " +
                        std::to_string(cfg_.rows[size_t(f)]) + ") (−1 is padding)");
  }
  if (has_prefetched_ && ctx.training) {
    for (int64_t f = 0; f < F; ++f) {
      const Tensor& t = ids[size_t(f)];
      const auto& want = prefetched_[size_t(f)];
      if (int64_t(want.size()) != t.numel() || !std::equal(want.begin(), want.end(), t.i32()))
        throw Error(Errc::kInternal, "sharded embeddings: feature " + std::to_string(f) +
                                         "'s ids are not the ones prefetched for this forward");
    }
    ex_->use_prefetched_ids(b, batches_);
    has_prefetched_ = false;
  } else {
    ex_->send_ids(ids, batches_);
  }
  for (int s = 0; s < ex_->world(); ++s)
    for (size_t k = 0; k < shards_.size(); ++k) pool(s, k);
  ex_->return_pooled();
  for (int64_t f = 0; f < F; ++f) {
    out_[size_t(f)].resize({b, dim}, DType::kF32);
    out_[size_t(f)].zero();
  }
  for (int o = 0; o < ex_->world(); ++o) {
    const auto& blocks = ex_->owned(o);
    for (size_t k = 0; k < blocks.size(); ++k) {
      const TableShard& s = blocks[k].shard;
      const float* in = ex_->pooled_in(o, k);
      float* e = out_[size_t(blocks[k].f)].f32();
      for (int64_t i = 0; i < b; ++i)
        for (int64_t c = 0; c < s.cols(); ++c) e[i * dim + s.col_begin + c] += in[i * s.cols() + c];
    }
  }
  for (int64_t f = 0; f < F; ++f) pooled[size_t(f)] = &out_[size_t(f)];
}

void ShardedTables::backward(const std::vector<Tensor>& dpooled, nn::Context&) {
  const int64_t dim = cfg_.dim, bag = cfg_.bag;
  for (int o = 0; o < ex_->world(); ++o) {
    const auto& blocks = ex_->owned(o);
    for (size_t k = 0; k < blocks.size(); ++k) {
      const TableShard& s = blocks[k].shard;
      const Tensor& d = dpooled[size_t(blocks[k].f)];
      float* g = ex_->grad_out(o, k);
      const int64_t b = d.dim(0);
      for (int64_t i = 0; i < b; ++i)
        std::memcpy(g + i * s.cols(), d.f32() + i * dim + s.col_begin, size_t(s.cols()) * 4);
    }
  }
  ex_->send_grads(has_next_ ? &next_ids_ : nullptr);
  if (has_next_) {
    prefetched_.assign(next_ids_.size(), {});
    for (size_t f = 0; f < next_ids_.size(); ++f)
      prefetched_[f].assign(next_ids_[f].i32(), next_ids_[f].i32() + next_ids_[f].numel());
    has_next_ = false;
    has_prefetched_ = true;
  }
  for (size_t k = 0; k < shards_.size(); ++k) {
    Shard& sh = shards_[k];
    const int64_t cols = sh.s.cols();
    for (int s = 0; s < ex_->world(); ++s) {
      const int32_t* ids = ex_->ids(s, k);
      const float* g = ex_->grad_in(s, k);
      for (int64_t i = 0; i < ex_->batch(s); ++i) {
        const int32_t* bi = ids + i * bag;
        const float wt = bag_weight(bi, bag, cfg_.mode);
        const float* gi = g + i * cols;
        for (int64_t j = 0; j < bag; ++j) {
          if (bi[j] < sh.s.row_begin || bi[j] >= sh.s.row_end) continue;
          float* acc = sh.grads.slot(bi[j] - sh.s.row_begin);
          for (int64_t c = 0; c < cols; ++c) acc[c] += wt * gi[c];
        }
      }
    }
  }
}

void ShardedTables::prefetch(const std::vector<Tensor>& next_ids) {
  BRAID_CHECK_ARG(int64_t(next_ids.size()) == cfg_.features() && !batches_.empty(),
                  "ShardedTables::prefetch: ids of every feature and known batch sizes "
                  "(set_batches) are needed");
  next_ids_.resize(next_ids.size());
  for (size_t f = 0; f < next_ids.size(); ++f) {
    next_ids_[f].resize(next_ids[f].shape(), DType::kI32);
    if (next_ids[f].nbytes()) std::memcpy(next_ids_[f].raw(), next_ids[f].raw(), next_ids[f].nbytes());
  }
  has_next_ = true;
}

void ShardedTables::release_activations() {
  for (Tensor& t : out_) t.release();
}

void ShardedTables::begin_step() {
  for (Shard& sh : shards_) sh.grads.clear();
}

void ShardedTables::apply(float lr) {
  std::vector<std::vector<int64_t>> rows(shards_.size());
  std::vector<std::vector<const float*>> grads(shards_.size());
  touched_ = 0;
  for (size_t k = 0; k < shards_.size(); ++k) {
    shards_[k].grads.sorted(rows[k], grads[k]);
    touched_ += int64_t(rows[k].size());
  }
  // Row-wise Adagrad on a column-wise table: each row's square sum over
  // every rank's columns (every rank owns one column block of such a
  // table and has seen the same ids, so the same rows), in one all_reduce.
  std::vector<double> sq;
  std::vector<size_t> sq_at(shards_.size(), 0);
  for (size_t k = 0; k < shards_.size(); ++k) {
    sq_at[k] = sq.size();
    if (!opt_.has_state()) continue;
    for (const float* g : grads[k]) sq.push_back(nn::row_square_sum(g, shards_[k].s.cols()));
  }
  bool column = false;
  for (const TablePlan& t : plan_.tables) column = column || t.kind == TableSharding::kColumn;
  if (opt_.has_state() && column) {
    // Every rank holds one column block of each column-wise table, in
    // feature order, and has seen the same ids: the entries line up.
    std::vector<double> col;
    for (size_t k = 0; k < shards_.size(); ++k)
      if (shards_[k].kind == TableSharding::kColumn)
        col.insert(col.end(), sq.begin() + long(sq_at[k]),
                   sq.begin() + long(sq_at[k] + rows[k].size()));
    comm_->all_reduce(col.data(), col.data(), col.size(), DType::kF64, ReduceOp::kSum);
    size_t at = 0;
    for (size_t k = 0; k < shards_.size(); ++k)
      if (shards_[k].kind == TableSharding::kColumn)
        for (size_t i = 0; i < rows[k].size(); ++i) sq[sq_at[k] + i] = col[at++];
  }
  for (size_t k = 0; k < shards_.size(); ++k) {
    Shard& sh = shards_[k];
    opt_.update(sh.w.data(), sh.s.cols(), sh.sum.data(), rows[k].data(), grads[k].data(),
                opt_.has_state() ? sq.data() + sq_at[k] : nullptr, int64_t(rows[k].size()),
                cfg_.dim, lr);
    sh.grads.clear();
  }
}

void ShardedTables::add_state(Checkpoint& ck) {
  const int me = comm_->rank();
  for (int64_t f = 0; f < cfg_.features(); ++f) {
    const int64_t rows = cfg_.rows[size_t(f)], dim = cfg_.dim;
    Tensor full, sum;
    if (me == 0) {
      full = Tensor({rows, dim});
      if (opt_.has_state()) sum = Tensor({rows});
    }
    const TablePlan& t = plan_.tables[size_t(f)];
    for (const TableShard& s : t.shards) {
      // The row state of a column-wise table is the same on every rank:
      // the first shard's owner sends it.
      const bool with_state = opt_.has_state() && (t.kind != TableSharding::kColumn || s.col_begin == 0);
      const uint32_t tag = uint32_t(f);
      std::vector<float> w, st;
      if (s.rank == me) {
        for (const Shard& sh : shards_)
          if (sh.f == f) {
            w = sh.w;
            st = sh.sum;
          }
        if (me != 0) {
          comm_->send(w.data(), w.size(), DType::kF32, 0, tag);
          if (with_state) comm_->send(st.data(), st.size(), DType::kF32, 0, tag);
        }
      } else if (me == 0) {
        w.resize(size_t(s.rows() * s.cols()));
        comm_->recv(w.data(), w.size(), DType::kF32, s.rank, tag);
        if (with_state) {
          st.resize(size_t(s.rows()));
          comm_->recv(st.data(), st.size(), DType::kF32, s.rank, tag);
        }
      }
      if (me != 0) continue;
      for (int64_t r = 0; r < s.rows(); ++r)
        std::memcpy(full.f32() + (s.row_begin + r) * dim + s.col_begin, w.data() + r * s.cols(),
                    size_t(s.cols()) * 4);
      if (with_state && !st.empty()) std::memcpy(sum.f32() + s.row_begin, st.data(), st.size() * 4);
    }
    if (me == 0) {
      ck.tensors.insert_or_assign("model/" + table_name(f), std::move(full));
      if (opt_.has_state()) ck.tensors.insert_or_assign(state_name(f), std::move(sum));
    }
  }
  if (me == 0) ck.meta["table_optim/kind"] = opt_.name();
}

void ShardedTables::load_state(const Checkpoint& ck) {
  for (Shard& sh : shards_) {
    const int64_t rows = cfg_.rows[size_t(sh.f)], dim = cfg_.dim;
    const std::string key = "model/" + table_name(sh.f);
    auto it = ck.tensors.find(key);
    if (it == ck.tensors.end()) throw Error(Errc::kCorrupt, "checkpoint lacks " + key);
    if (it->second.shape() != Shape{rows, dim})
      throw Error(Errc::kCorrupt, "checkpoint " + key + " has shape " +
                                      shape_str(it->second.shape()) + " vs table [" +
                                      std::to_string(rows) + ", " + std::to_string(dim) + "]");
    const int64_t cols = sh.s.cols();
    for (int64_t r = 0; r < sh.s.rows(); ++r)
      std::memcpy(sh.w.data() + r * cols, it->second.f32() + (sh.s.row_begin + r) * dim + sh.s.col_begin,
                  size_t(cols) * 4);
    if (!opt_.has_state()) continue;
    auto st = ck.tensors.find(state_name(sh.f));
    if (st == ck.tensors.end() || st->second.numel() != rows)
      throw Error(Errc::kCorrupt, "checkpoint " + state_name(sh.f) +
                                      (st == ck.tensors.end()
                                           ? " is missing (was the run's table optimizer adagrad?)"
                                           : " has the wrong size"));
    if (sh.s.rows() > 0)
      std::memcpy(sh.sum.data(), st->second.f32() + sh.s.row_begin, size_t(sh.s.rows()) * 4);
  }
}

}  // namespace braid::parallel
