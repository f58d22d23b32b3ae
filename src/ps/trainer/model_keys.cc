// A model's parameters as parameter-server keys (braid/ps_trainer.h): a
// DLRM's embedding tables are sparse keys. A worker's pull for clock c
// carries the dense keys and only the table rows batch c names
// (worker_trainer.cc); backward leaves each table's gradient as rows
// (EmbeddingBag::touched_rows / row_grads), and those rows alone are
// pushed. A row a batch does not name is neither read nor written.
#include <algorithm>
#include <cstring>

#include "braid/dlrm.h"
#include "braid/error.h"
#include "braid/ps_trainer.h"

namespace braid::ps {

ModelKeys::ModelKeys(nn::Module& model, const std::vector<nn::Parameter*>& params)
    : params_(params) {
  nn::Dlrm* dlrm = nullptr;
  for (nn::Module* u : nn::units_of(model))
    if ((dlrm = dynamic_cast<nn::Dlrm*>(u))) break;
  if (!dlrm) return;
  dlrm->set_dense_table_grads(false);
  dense_ = dlrm->config().dense;
  bag_ = dlrm->config().bag;
  for (int64_t f = 0; f < dlrm->config().features(); ++f) {
    nn::EmbeddingBag& bag = dlrm->table(f);
    const auto it = std::find(params.begin(), params.end(), &bag.weight());
    BRAID_CHECK_ARG(it != params.end(), "braid ps: table " + std::to_string(f) +
                                            " is not among the model's parameters");
    tables_.push_back({size_t(it - params.begin()), &bag, {}, {}, {}});
  }
}

bool ModelKeys::is_table(size_t key) const {
  return std::any_of(tables_.begin(), tables_.end(), [&](const Table& t) { return t.key == key; });
}

std::vector<KeyData> ModelKeys::dense(bool grads) const {
  std::vector<KeyData> out;
  for (size_t i = 0; i < params_.size(); ++i)
    if (!is_table(i))
      out.push_back({KeyId(i), {}, grads ? params_[i]->grad.f32() : params_[i]->data.f32()});
  return out;
}

void ModelKeys::add_keys(Layout& layout, std::vector<std::vector<float>>& init) const {
  for (size_t i = 0; i < params_.size(); ++i) {
    const nn::Parameter* p = params_[i];
    if (is_table(i)) {
      const auto& t = *std::find_if(tables_.begin(), tables_.end(),
                                    [&](const Table& x) { return x.key == i; });
      layout.add_sparse(p->name, t.bag->rows(), t.bag->dim(), p->decay);
      init.emplace_back();
    } else {
      layout.add_dense(p->name, p->size(), p->decay);
      init.emplace_back(p->data.f32(), p->data.f32() + p->size());
    }
  }
}

void ModelKeys::init_row(KeyId key, int64_t row, float* out) const {
  const nn::Parameter* p = params_.at(key);
  const int64_t width = p->data.shape().back();
  std::memcpy(out, p->data.f32() + row * width, size_t(width) * sizeof(float));
}

void ModelKeys::add_rows_pull(std::vector<KeyData>& out) {
  pending_ = true;
  for (Table& t : tables_) {
    t.buf.resize(t.rows.size() * size_t(t.bag->dim()));
    if (!t.rows.empty()) out.push_back({KeyId(t.key), t.rows, t.buf.data()});
  }
}

void ModelKeys::store_pulled() {
  if (!pending_) return;
  pending_ = false;
  for (Table& t : tables_) {
    float* w = t.bag->weight().data.f32();
    const size_t dim = size_t(t.bag->dim());
    for (size_t i = 0; i < t.rows.size(); ++i)
      std::memcpy(w + size_t(t.rows[i]) * dim, t.buf.data() + i * dim, dim * sizeof(float));
  }
}

void ModelKeys::add_pull(std::vector<KeyData>& out, const Tensor& x) {
  if (tables_.empty()) return;
  const int64_t B = x.shape().at(0), width = x.shape().at(1);
  const float* in = x.f32();
  for (size_t f = 0; f < tables_.size(); ++f) {
    Table& t = tables_[f];
    t.rows.clear();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < bag_; ++j) {
        const float id = in[b * width + dense_ + int64_t(f) * bag_ + j];
        // Out-of-range ids are the forward's to report (it names the
        // feature); here they are only left out of the pull.
        if (id >= 0 && id < float(t.bag->rows())) t.rows.push_back(int64_t(id));
      }
    std::sort(t.rows.begin(), t.rows.end());
    t.rows.erase(std::unique(t.rows.begin(), t.rows.end()), t.rows.end());
  }
  add_rows_pull(out);
}

void ModelKeys::pull_all(Worker& worker, int64_t clock) {
  for (Table& t : tables_) {
    t.rows.resize(size_t(t.bag->rows()));
    for (size_t r = 0; r < t.rows.size(); ++r) t.rows[r] = int64_t(r);
  }
  std::vector<KeyData> req;
  add_rows_pull(req);
  if (!req.empty()) worker.pull(req, clock);
  store_pulled();
}

void ModelKeys::add_push(std::vector<KeyData>& out, float scale) {
  for (Table& t : tables_) {
    const std::vector<int64_t>& rows = t.bag->touched_rows();
    if (rows.empty()) continue;
    const Tensor& g = t.bag->row_grads();
    t.grads.assign(g.f32(), g.f32() + g.numel());
    for (float& v : t.grads) v *= scale;
    out.push_back({KeyId(t.key), rows, t.grads.data()});
  }
}

}  // namespace braid::ps
