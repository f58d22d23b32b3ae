// ActivationSlots: the header says what a slot is and when it is taken.
#include "parallel/pp/activation_slots.h"

#include <algorithm>

#include "braid/error.h"

namespace braid::parallel::pp_detail {

void ActivationSlots::add(std::vector<nn::Module*> modules) {
  if (slots_.empty())
    for (nn::Module* m : modules) m->collect_parameters(first_params_);
  else
    share(modules);
  slots_.push_back(Slot{std::move(modules), -1, 0});
}

void ActivationSlots::share(const std::vector<nn::Module*>& modules) {
  std::vector<nn::Parameter*> params;
  for (nn::Module* m : modules) m->collect_parameters(params);
  const std::string copy = what_ + ": a copy of its modules";
  BRAID_CHECK_ARG(params.size() == first_params_.size(),
                  copy + " has " + std::to_string(params.size()) + " parameters, the model " +
                      std::to_string(first_params_.size()));
  for (size_t i = 0; i < params.size(); ++i) {
    nn::Parameter& p = *params[i];
    nn::Parameter& q = *first_params_[i];
    BRAID_CHECK_ARG(p.name == q.name && p.data.shape() == q.data.shape(),
                    copy + " has parameter " + p.name + " " + shape_str(p.data.shape()) +
                        " where the model has " + q.name + " " + shape_str(q.data.shape()));
    // Modules read their weights through Parameter::data / ::grad at every
    // call (none keeps a raw pointer from construction), so these views are
    // all a copy ever uses; its own buffers are freed here.
    p.data = Tensor::view(q.data.raw(), q.data.shape());
    p.grad = Tensor::view(q.grad.raw(), q.grad.shape());
    model_of_[&p] = &q;
  }
}

int ActivationSlots::take(int mb, int* evicted) {
  if (evicted) *evicted = -1;
  int pick = -1;
  for (size_t k = 0; k < slots_.size() && pick < 0; ++k)
    if (slots_[k].mb < 0) pick = int(k);
  if (pick < 0) {
    if (slots_.empty()) throw Error(Errc::kInternal, what_ + " has no activation slot");
    for (size_t k = 0; k < slots_.size(); ++k)
      if (pick < 0 || backward_at_[size_t(slots_[k].mb)] >
                          backward_at_[size_t(slots_[size_t(pick)].mb)])
        pick = int(k);
    slot_of_[size_t(slots_[size_t(pick)].mb)] = -1;
    if (evicted) *evicted = slots_[size_t(pick)].mb;
  }
  Slot& s = slots_[size_t(pick)];
  s.mb = mb;
  s.bytes = 0;
  slot_of_[size_t(mb)] = pick;
  return pick;
}

void ActivationSlots::free(int mb) {
  const int k = slot_of_[size_t(mb)];
  if (k < 0) return;
  slots_[size_t(k)].mb = -1;
  slots_[size_t(k)].bytes = 0;
  slot_of_[size_t(mb)] = -1;
}

void ActivationSlots::clear() {
  for (Slot& s : slots_) {
    s.mb = -1;
    s.bytes = 0;
  }
  std::fill(slot_of_.begin(), slot_of_.end(), -1);
}

int64_t ActivationSlots::bytes_in_use() const {
  int64_t n = 0;
  for (const Slot& s : slots_)
    if (s.mb >= 0) n += s.bytes;
  return n;
}

int ActivationSlots::in_use() const {
  int n = 0;
  for (const Slot& s : slots_) n += s.mb >= 0;
  return n;
}

}  // namespace braid::parallel::pp_detail
