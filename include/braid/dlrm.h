// nn::Dlrm — a DLRM-like recommendation model (Naumov et al., 2019):
//
//   dense features [B, D] ─ bottom MLP (Linear+ReLU …, → dim) ─ z0 [B, dim]
//   categorical feature f ─ EmbeddingBag f (its own table)   ─ e_f [B, dim]
//   interaction(z0, e_0 … e_{F−1}) ─ top MLP (Linear, ReLU between, → 1)
//   ─ one logit per sample, trained with BinaryCrossEntropyWithLogits.
//
// Interaction kDot (the default, DLRM's "dot"): the top MLP reads
// [z0, v_i·v_j for every pair i > j] with v_0 = z0, v_{f+1} = e_f — dim +
// (F+1)F/2 values. kCat: [z0, e_0, …, e_{F−1}] — dim·(F+1) values.
//
// Input: one f32 row per sample, [dense_0 … dense_{D−1}, ids of feature 0
// (bag of them), ids of feature 1, …] — width D + F·bag, the layout
// ClickData::gather writes. Ids are stored as f32 values, exact because
// every table has at most 2^24 rows (checked); −1 is padding in a bag. A
// non-integral id or one outside its table throws Error(kInvalidArgument)
// naming the feature.
//
// Parameters in forward order: bottom MLP (bot.fc1 …), the tables
// (emb.0.weight …), top MLP (top.fc1 …). backward fires the grad-ready hook
// for each exactly once: top, tables F−1 … 0, bottom. The tables' sparse
// gradients (EmbeddingBag::touched_rows / row_grads) are there for a
// parameter-server worker after every backward.
//
// Initialisation (DLRM's): Linear weights N(0, 2/(in+out)), biases
// N(0, 1/out), tables U(±1/√rows), from a counter-based RNG keyed on
// (seed, parameter index, element); dlrm_table_init gives any block of a
// table's initial values, so a table split over ranks starts as the whole.
//
// Where the tables live is a DlrmTables: by default one EmbeddingBag per
// feature in this process; a model-parallel DLRM passes its own (the
// sharded tables of braid/sharded_embeddings.h), and its parameters are
// then only the two MLPs (the tables' own, if it exposes any).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "braid/data.h"
#include "braid/layers.h"

namespace braid::nn {

struct DlrmConfig {
  enum class Interaction { kDot, kCat };
  int64_t dense = 4;                                // D dense features (≥ 1)
  std::vector<int64_t> rows = std::vector<int64_t>(8, 1000);  // per-feature table rows; F = size
  int64_t bag = 1;                                  // ids per feature per sample
  int64_t dim = 16;                                 // embedding width = bottom MLP output
  std::vector<int64_t> bottom = {32};               // bottom MLP hidden sizes
  std::vector<int64_t> top = {64, 32};              // top MLP hidden sizes
  EmbeddingBag::Mode mode = EmbeddingBag::Mode::kSum;
  Interaction interaction = Interaction::kDot;

  int64_t features() const { return int64_t(rows.size()); }
  int64_t input_width() const { return dense + features() * bag; }
  // Width of the interaction output (the top MLP's input).
  int64_t interaction_width() const;
};

// The model for ClickData: its dense, feature and bag counts and table
// sizes, with embedding width `dim`.
DlrmConfig dlrm_config_for(const ClickConfig& data, int64_t dim);

// Table f's initial values, rows [row_begin, row_end) × columns
// [col_begin, col_end), row-major into `out`: the values the Dlrm
// constructor gives those elements. Throws Error(kInvalidArgument) for a
// feature or block outside the table.
void dlrm_table_init(const DlrmConfig& cfg, uint64_t seed, int64_t f, int64_t row_begin,
                     int64_t row_end, int64_t col_begin, int64_t col_end, float* out);

// An input row block x [B, input_width] split as Dlrm::forward reads it:
// the dense features [B, D] and each feature's ids, i32 [B, bag]. Throws
// Error(kInvalidArgument) naming `who` and the feature for a bad shape or a
// value that is not an integer id in [−1, 2^24).
void dlrm_split_input(const DlrmConfig& cfg, const Tensor& x, Tensor& dense,
                      std::vector<Tensor>& ids, const std::string& who);

// The embedding lookups of a Dlrm. forward gets every feature's ids, i32
// [B, bag] (−1 padding; in range, checked by Dlrm), and sets pooled[f] to
// feature f's pooled bag [B, dim] (sum or mean, DlrmConfig::mode), valid
// until the next forward or release; backward gets dL/dpooled per feature
// and takes the tables' gradients. Collective where the tables are spread
// over ranks: every rank calls forward and backward in step.
class DlrmTables {
 public:
  virtual ~DlrmTables() = default;
  virtual void forward(const std::vector<Tensor>& ids, std::vector<const Tensor*>& pooled,
                       Context& ctx) = 0;
  virtual void backward(const std::vector<Tensor>& dpooled, Context& ctx) = 0;
  virtual void collect_parameters(std::vector<Parameter*>& out) { (void)out; }
  virtual void release_activations() {}
};

class Dlrm : public Module {
 public:
  // Throws Error(kInvalidArgument) naming the field for a size < 1 (F may
  // not be 0) or a table of more than 2^24 rows. `tables` null: one local
  // EmbeddingBag per feature.
  Dlrm(std::string name, DlrmConfig cfg, uint64_t seed,
       std::unique_ptr<DlrmTables> tables = nullptr);
  const Tensor& forward(const Tensor& x, Context& ctx) override;
  const Tensor& backward(const Tensor& dy, Context& ctx) override;
  void collect_parameters(std::vector<Parameter*>& out) override;
  void release_activations() override;

  const DlrmConfig& config() const { return cfg_; }
  // Feature f's local table; Error(kInvalidArgument) when the tables are
  // a DlrmTables of the caller's.
  EmbeddingBag& table(int64_t f);
  bool local_tables() const { return tables_ == nullptr; }
  // Every table's dense gradient on or off (EmbeddingBag::set_dense_grad).
  void set_dense_table_grads(bool on);

 private:
  void interact(int64_t B);
  void interact_backward(const Tensor& dinter, int64_t B);

  DlrmConfig cfg_;
  Sequential bottom_, top_;
  std::vector<std::unique_ptr<EmbeddingBag>> bags_;  // local tables (tables_ null)
  std::unique_ptr<DlrmTables> tables_;
  Tensor dense_;                  // [B, D] copied out of x
  std::vector<Tensor> ids_;       // per feature, i32 [B, bag]
  const Tensor* z0_ = nullptr;    // bottom output (owned by bottom_)
  std::vector<const Tensor*> e_;  // table outputs (owned by the bags)
  Tensor inter_;                  // [B, interaction_width]
  Tensor dz0_;                    // [B, dim]
  std::vector<Tensor> de_;        // per feature, [B, dim]
  Tensor empty_;
};

// A Sequential "dlrm" holding one Dlrm (so `braid train` drives it as it
// drives make_mlp's and make_gpt's models).
// `tables` as the Dlrm constructor's.
std::unique_ptr<Sequential> make_dlrm(const DlrmConfig& cfg, uint64_t seed,
                                      std::unique_ptr<DlrmTables> tables = nullptr);

}  // namespace braid::nn
