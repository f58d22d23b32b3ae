#include "braid/module.h"

#include "braid/error.h"

namespace braid::nn {

Module& Sequential::add(std::unique_ptr<Module> m) {
  BRAID_CHECK_ARG(m != nullptr, "Sequential " + name_ + ": null module");
  children_.push_back(std::move(m));
  return *children_.back();
}

const Tensor& Sequential::forward(const Tensor& x, Context& ctx) {
  BRAID_CHECK_ARG(!children_.empty(), "Sequential " + name_ + " is empty");
  const Tensor* h = &x;
  for (auto& c : children_) h = &c->forward(*h, ctx);
  return *h;
}

const Tensor& Sequential::backward(const Tensor& dy, Context& ctx) {
  const Tensor* g = &dy;
  for (size_t i = children_.size(); i-- > 0;) g = &children_[i]->backward(*g, ctx);
  return *g;
}

void Sequential::collect_parameters(std::vector<Parameter*>& out) {
  for (auto& c : children_) c->collect_parameters(out);
}

void Sequential::release_activations() {
  for (auto& c : children_) c->release_activations();
}

void Sequential::set_input_grad(bool needed) {
  input_grad_ = needed;
  if (!children_.empty()) children_.front()->set_input_grad(needed);
}

void zero_grad(const std::vector<Parameter*>& params) {
  for (Parameter* p : params) p->grad.zero();
}

int64_t count_parameters(const std::vector<Parameter*>& params) {
  int64_t n = 0;
  for (const Parameter* p : params) n += p->size();
  return n;
}

}  // namespace braid::nn
