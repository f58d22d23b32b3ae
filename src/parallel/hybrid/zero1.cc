// ZeRO-1 over the dp group; the layout is in zero1.h.
#include "parallel/hybrid/zero1.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "braid/error.h"

namespace braid::parallel {

Zero1::Zero1(const std::vector<nn::Parameter*>& params, std::shared_ptr<Communicator> dp)
    : params_(params), dp_(std::move(dp)) {
  int64_t total = 0;
  for (const nn::Parameter* p : params_) {
    starts_.push_back(total);
    total += p->size();
  }
  const int n = dp_->size();
  per_rank_ = (total + n - 1) / n;
  const int64_t lo = std::min(total, per_rank_ * dp_->rank());
  const int64_t hi = std::min(total, lo + per_rank_);
  owned_ = hi - lo;
  for (size_t i = 0; i < params_.size(); ++i) {
    nn::Parameter* p = params_[i];
    const int64_t a = std::max(lo, starts_[i]), b = std::min(hi, starts_[i] + p->size());
    if (a >= b) continue;
    Piece piece;
    piece.param = i;
    piece.offset = a - starts_[i];
    piece.view = std::make_unique<nn::Parameter>(p->name, Shape{0}, p->decay);
    piece.view->data = Tensor::view(p->data.f32() + piece.offset, {b - a});
    piece.view->grad = Tensor::view(p->grad.f32() + piece.offset, {b - a});
    piece_ptrs_.push_back(piece.view.get());
    pieces_.push_back(std::move(piece));
  }
  mine_ = Tensor({per_rank_});
  all_ = Tensor({per_rank_ * n});
}

double Zero1::step(nn::Optimizer& opt, float lr) {
  opt.step(piece_ptrs_, lr);
  float* mine = mine_.f32();
  for (const Piece& p : pieces_) {
    std::memcpy(mine, p.view->data.f32(), p.view->data.nbytes());
    mine += p.view->size();
  }
  const auto t0 = std::chrono::steady_clock::now();
  dp_->all_gather(mine_.f32(), all_.f32(), size_t(per_rank_), DType::kF32);
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (size_t i = 0; i < params_.size(); ++i)
    std::memcpy(params_[i]->data.f32(), all_.f32() + starts_[i], params_[i]->data.nbytes());
  return waited;
}

Checkpoint Zero1::gather_state(const nn::Optimizer& opt) {
  Checkpoint pieces, whole;
  opt.save_state(pieces);
  whole.meta = pieces.meta;
  // Slot names from this rank's first piece; a rank that owns nothing
  // sends zeros, whose order does not matter.
  std::vector<std::string> slots;
  if (!pieces_.empty()) {
    const std::string prefix = "optim/" + pieces_.front().view->name + "/";
    for (const auto& [key, t] : pieces.tensors)
      if (key.compare(0, prefix.size(), prefix) == 0) slots.push_back(key.substr(prefix.size()));
  }
  const size_t count = opt.steps() == 0 ? 0 : opt.state_per_param();
  for (size_t k = 0; k < count; ++k) {
    float* mine = mine_.f32();
    std::fill_n(mine, per_rank_, 0.0f);
    for (const Piece& p : pieces_) {
      if (k >= slots.size()) break;
      const Tensor& t = pieces.tensors.at("optim/" + p.view->name + "/" + slots[k]);
      std::memcpy(mine, t.f32(), t.nbytes());
      mine += t.numel();
    }
    dp_->all_gather(mine_.f32(), all_.f32(), size_t(per_rank_), DType::kF32);
    if (k >= slots.size()) continue;  // owns nothing: no names to file under
    for (size_t i = 0; i < params_.size(); ++i) {
      Tensor t(params_[i]->data.shape());
      std::memcpy(t.f32(), all_.f32() + starts_[i], t.nbytes());
      whole.tensors.insert_or_assign("optim/" + params_[i]->name + "/" + slots[k], std::move(t));
    }
  }
  return whole;
}

void Zero1::load_state(const Checkpoint& whole, nn::Optimizer& opt) {
  Checkpoint pieces;
  pieces.meta = whole.meta;
  for (const Piece& p : pieces_) {
    const std::string prefix = "optim/" + p.view->name + "/";
    for (auto it = whole.tensors.lower_bound(prefix);
         it != whole.tensors.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
      BRAID_CHECK_ARG(it->second.numel() == params_[p.param]->size(),
                      "ZeRO-1: " + it->first + " has " + std::to_string(it->second.numel()) +
                          " elements, the parameter " + std::to_string(params_[p.param]->size()));
      Tensor t({p.view->size()});
      std::memcpy(t.f32(), it->second.f32() + p.offset, t.nbytes());
      pieces.tensors.insert_or_assign(it->first, std::move(t));
    }
  }
  opt.load_state(pieces, piece_ptrs_);
}

}  // namespace braid::parallel
