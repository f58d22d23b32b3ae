// Row-wise optimizers for embedding tables, as production DLRMs train
// them: only the rows a step's batch touched move, and their state is per
// row, never per element. nn::RowGrads gathers a table's (or a table
// shard's) sparse gradient over a step's micro-batches; nn::RowOptimizer
// applies one update to the touched rows.
//
//   sgd:      w_r −= lr · g_r
//   adagrad:  s_r += (Σ_c g_rc²) / dim;  w_r −= lr · g_r / (√s_r + eps)
//             (row-wise Adagrad: one accumulator s_r per row, the mean of
//             the row's squared gradient over the table's FULL width dim)
//
// A row no batch named keeps its value and its state: untouched rows cost
// nothing. Both rules use no momentum and no weight decay (so SGD here is
// exactly dense SGD with momentum 0 on the table, and row-wise Adagrad is
// its own rule, not nn::AdamW).
//
// State in checkpoints: "optim/<table parameter name>/rowwise_sum", f32
// [rows] (adagrad only), the serial layout whatever the sharding.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace braid::nn {

// A sparse gradient: rows (any int64 keys) of `width` floats each,
// accumulated across calls until clear().
class RowGrads {
 public:
  explicit RowGrads(int64_t width) : width_(width) {}
  int64_t width() const { return width_; }
  // Row `row`'s gradient, zero-filled the first time it is asked for.
  // The pointer stays valid until the next slot() of a new row or clear().
  float* slot(int64_t row);
  // Adds g[0 .. width) into row `row`.
  void add(int64_t row, const float* g);
  int64_t size() const { return int64_t(rows_.size()); }
  // The touched rows in increasing order and each one's gradient.
  void sorted(std::vector<int64_t>& rows, std::vector<const float*>& grads) const;
  void clear();

 private:
  int64_t width_;
  std::unordered_map<int64_t, int64_t> index_;
  std::vector<int64_t> rows_;
  std::vector<float> data_;
};

class RowOptimizer {
 public:
  enum class Kind { kSgd, kAdagrad };
  explicit RowOptimizer(Kind kind = Kind::kSgd, float eps = 1e-8f) : kind_(kind), eps_(eps) {}
  // "sgd" or "adagrad"; anything else throws Error(kInvalidArgument).
  static RowOptimizer parse(const std::string& name);
  Kind kind() const { return kind_; }
  const char* name() const { return kind_ == Kind::kSgd ? "sgd" : "adagrad"; }
  // Whether it keeps a per-row accumulator (adagrad).
  bool has_state() const { return kind_ == Kind::kAdagrad; }
  static constexpr const char* kStateSlot = "rowwise_sum";

  // One update of n touched rows of a row-major block `w` whose rows are
  // `width` floats apart: row rows[i] gets gradient grads[i] (width
  // floats). adagrad: state[rows[i]] is that row's accumulator and sq[i]
  // the row's Σ_c g² over the table's full width `full_width` (a column
  // shard passes the sum over every shard of the row; sq may be null when
  // width == full_width, and is then computed here). sgd ignores state,
  // sq and full_width.
  void update(float* w, int64_t width, float* state, const int64_t* rows,
              const float* const* grads, const double* sq, int64_t n, int64_t full_width,
              float lr) const;

 private:
  Kind kind_;
  float eps_;
};

// Σ_c g[c]² over n floats, in double (adagrad's row statistic).
double row_square_sum(const float* g, int64_t n);

}  // namespace braid::nn
