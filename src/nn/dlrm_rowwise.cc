// DlrmRowwiseHooks: a DLRM's local tables trained row-wise in one process
// (include/braid/dlrm_rowwise.h).
#include "braid/dlrm_rowwise.h"

#include <algorithm>
#include <cstring>

#include "braid/checkpoint.h"
#include "braid/error.h"
#include "braid/layers.h"

namespace braid::nn {

namespace {
Dlrm* find_dlrm(Module& m) {
  if (auto* d = dynamic_cast<Dlrm*>(&m)) return d;
  for (Module* u : units_of(m))
    if (auto* d = dynamic_cast<Dlrm*>(u)) return d;
  return nullptr;
}
}  // namespace

DlrmRowwiseHooks::DlrmRowwiseHooks(Module& model, RowOptimizer opt) : opt_(opt) {
  dlrm_ = find_dlrm(model);
  BRAID_CHECK_ARG(dlrm_ != nullptr && dlrm_->local_tables(),
                  "DlrmRowwiseHooks: model " + model.name() + " holds no DLRM with local tables");
  dlrm_->set_dense_table_grads(false);
  const DlrmConfig& c = dlrm_->config();
  std::vector<const Parameter*> tables;
  for (int64_t f = 0; f < c.features(); ++f) {
    tables.push_back(&dlrm_->table(f).weight());
    grads_.emplace_back(c.dim);
    sum_.emplace_back(opt_.has_state() ? size_t(c.rows[size_t(f)]) : 0, 0.0f);
  }
  for (Parameter* p : model.parameters())
    if (std::find(tables.begin(), tables.end(), p) == tables.end()) dense_.push_back(p);
}

int64_t DlrmRowwiseHooks::table_bytes() const {
  int64_t b = 0;
  const DlrmConfig& c = dlrm_->config();
  for (int64_t f = 0; f < c.features(); ++f) b += c.rows[size_t(f)] * c.dim * 4;
  return b;
}

int64_t DlrmRowwiseHooks::state_bytes() const {
  int64_t b = 0;
  for (const auto& s : sum_) b += int64_t(s.size()) * 4;
  return b;
}

void DlrmRowwiseHooks::begin_step(int64_t, const std::vector<Parameter*>&) {
  for (Parameter* p : dense_) p->grad.zero();
  for (RowGrads& g : grads_) g.clear();
}

void DlrmRowwiseHooks::after_backward(size_t) {
  for (size_t f = 0; f < grads_.size(); ++f) {
    EmbeddingBag& bag = dlrm_->table(int64_t(f));
    const std::vector<int64_t>& rows = bag.touched_rows();
    const float* g = bag.row_grads().f32();
    for (size_t i = 0; i < rows.size(); ++i) grads_[f].add(rows[i], g + int64_t(i) * bag.dim());
  }
}

double DlrmRowwiseHooks::clip_grad_norm(const std::vector<Parameter*>&, double) {
  throw Error(Errc::kNotSupported,
              "gradient clipping with row-wise table optimizers is not built (the norm would "
              "span the tables' sparse gradients); drop --clip");
}

void DlrmRowwiseHooks::optimizer_step(Optimizer& opt, const std::vector<Parameter*>&, float lr) {
  opt.step(dense_, lr);
  std::vector<int64_t> rows;
  std::vector<const float*> g;
  for (size_t f = 0; f < grads_.size(); ++f) {
    grads_[f].sorted(rows, g);
    Parameter& w = dlrm_->table(int64_t(f)).weight();
    opt_.update(w.data.f32(), w.data.dim(1), sum_[f].data(), rows.data(), g.data(), nullptr,
                int64_t(rows.size()), w.data.dim(1), lr);
  }
}

void DlrmRowwiseHooks::save(const std::string& path, const Trainer& trainer,
                            const Optimizer& opt) const {
  Checkpoint ck;
  add_parameters(ck, trainer.parameters());
  opt.save_state(ck);
  ck.meta["optim/kind"] = opt.kind();
  ck.meta["table_optim/kind"] = opt_.name();
  if (opt_.has_state())
    for (size_t f = 0; f < sum_.size(); ++f) {
      Tensor t({int64_t(sum_[f].size())});
      std::memcpy(t.f32(), sum_[f].data(), sum_[f].size() * 4);
      ck.tensors.emplace("optim/" + dlrm_->table(int64_t(f)).weight().name + "/" +
                             RowOptimizer::kStateSlot,
                         std::move(t));
    }
  trainer.add_meta(ck);
  save_checkpoint(path, ck);
}

void DlrmRowwiseHooks::load(const std::string& path, Trainer& trainer, Optimizer& opt) {
  Checkpoint ck = load_checkpoint(path);
  const int64_t step = resume_step(ck, trainer.options().seed, path);
  load_parameters(ck, trainer.parameters());
  opt.load_state(ck, dense_);
  if (opt_.has_state())
    for (size_t f = 0; f < sum_.size(); ++f) {
      const std::string key = "optim/" + dlrm_->table(int64_t(f)).weight().name + "/" +
                              RowOptimizer::kStateSlot;
      auto it = ck.tensors.find(key);
      if (it == ck.tensors.end() || it->second.numel() != int64_t(sum_[f].size()))
        throw Error(Errc::kCorrupt, path + ": " + key + (it == ck.tensors.end()
                                                             ? " is missing (was the run's "
                                                               "table optimizer adagrad?)"
                                                             : " has the wrong size"));
      std::memcpy(sum_[f].data(), it->second.f32(), sum_[f].size() * 4);
    }
  trainer.set_next_step(step);
  trainer.restore_meta(ck.meta);
}

}  // namespace braid::nn
