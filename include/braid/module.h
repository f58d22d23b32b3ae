// nn::Module — a layer with an explicit forward and backward.
//
// The model is a tree of modules. `forward(x, ctx)` returns a reference to
// an output buffer the module owns and remembers a pointer to `x` (which
// must stay alive and unchanged until `backward`). `backward(dy, ctx)`
// accumulates (+=) into each parameter's `grad` and returns dL/dx in a
// buffer the module owns. Buffers are reused across steps: after the first
// step at a given batch shape, forward and backward allocate nothing —
// except under activation recomputation, which frees a block's buffers
// after its forward and backward and allocates them again when it runs.
//
// The gradient-ready hook. When `ctx.grad_ready` is set, backward calls it
// exactly once for every parameter, at the moment that parameter's gradient
// for this backward is final (no later part of this backward touches it).
// The order is the reverse of the forward order of the layers — the order
// in which data parallelism should start reducing buckets. The trainer sets
// the hook only on the last micro-batch of a step (when the accumulated
// gradient is final), so it fires once per parameter per optimizer step.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "braid/tensor.h"

namespace braid::nn {

struct Parameter {
  std::string name;   // unique within a model, e.g. "h.0.attn.qkv.weight"
  Tensor data;        // f32 values
  Tensor grad;        // f32, same shape as data; backward adds into it
  bool decay = true;  // weight decay applies (optimizers may honour it)

  Parameter(std::string n, Shape shape, bool wd = true)
      : name(std::move(n)), data(shape), grad(shape), decay(wd) {}
  int64_t size() const { return data.numel(); }
};

using GradReadyHook = std::function<void(Parameter&)>;

// Per-call state shared by all modules of one forward/backward.
struct Context {
  bool training = true;        // dropout active; eval skips caches where it can
  uint64_t seed = 0;           // run seed (dropout keys)
  int64_t step = 0;            // optimizer step (dropout keys)
  int64_t sample_offset = 0;   // global index of row 0 of this batch (dropout keys)
  // The trainer's dL/dlogits scale, 1 / (global batch · targets per
  // sample); 0 outside training. A layer that adds a loss of its own (the
  // MoE load-balancing loss, moe.h) scales its gradient by it.
  float loss_scale = 0;
  GradReadyHook grad_ready;    // see the file comment; may be empty

  void param_ready(Parameter& p) const {
    if (grad_ready) grad_ready(p);
  }
};

class Module {
 public:
  explicit Module(std::string name) : name_(std::move(name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  const std::string& name() const { return name_; }

  virtual const Tensor& forward(const Tensor& x, Context& ctx) = 0;
  virtual const Tensor& backward(const Tensor& dy, Context& ctx) = 0;

  // Appends this module's parameters (and its children's) in forward order.
  virtual void collect_parameters(std::vector<Parameter*>& out) { (void)out; }
  std::vector<Parameter*> parameters() {
    std::vector<Parameter*> v;
    collect_parameters(v);
    return v;
  }
  // Frees the buffers kept for backward and those backward wrote into
  // (activation recomputation calls it after a block's forward and after
  // its backward). The next forward or backward allocates them again.
  virtual void release_activations() {}
  // When false, backward may skip computing dL/dx and return an empty
  // tensor (the first layer of a model whose input needs no gradient).
  virtual void set_input_grad(bool needed) { input_grad_ = needed; }
  bool input_grad() const { return input_grad_; }

 protected:
  std::string name_;
  bool input_grad_ = true;
};

// Runs children in order; backward in reverse.
class Sequential : public Module {
 public:
  explicit Sequential(std::string name) : Module(std::move(name)) {}
  Module& add(std::unique_ptr<Module> m);
  template <class M, class... A>
  M& emplace(A&&... args) {
    auto p = std::make_unique<M>(std::forward<A>(args)...);
    M& r = *p;
    add(std::move(p));
    return r;
  }
  size_t size() const { return children_.size(); }
  Module& child(size_t i) { return *children_.at(i); }

  const Tensor& forward(const Tensor& x, Context& ctx) override;
  const Tensor& backward(const Tensor& dy, Context& ctx) override;
  void collect_parameters(std::vector<Parameter*>& out) override;
  void release_activations() override;
  void set_input_grad(bool needed) override;

 private:
  std::vector<std::unique_ptr<Module>> children_;
};

// Zeroes every parameter's gradient.
void zero_grad(const std::vector<Parameter*>& params);
// Total number of parameter elements.
int64_t count_parameters(const std::vector<Parameter*>& params);

}  // namespace braid::nn
