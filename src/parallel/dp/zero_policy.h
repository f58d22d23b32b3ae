// ZeRO stages as policy objects. A DataParallel holds one; the policy
// decides what this rank keeps of each bucket, how a bucket's gradients are
// summed across ranks, how parameters are gathered before a unit runs and
// released after, and what the optimizer updates. Everything stage-free
// (bucket layout, waiting, the bf16 exchange, the unit walk) is State's.
//
// Each stage is the one before plus one more thing sharded, so each class
// derives from the previous one and overrides only what that changes:
//   Replicated (0)  every rank holds everything; gradients all_reduce'd;
//                   the optimizer updates all parameters on every rank
//   Zero1      (1)  + optimizer state: the optimizer updates this rank's
//                   chunk of each bucket, whose parameters are then
//                   all_gather'ed in place (waited for lazily by the next
//                   forward); the clipping norm is summed over chunks
//   Zero2      (2)  + gradients: reduce_scatter into the chunk; the full
//                   gradient buffer lives only from the unit's backward
//                   until its reduction ends (at most two in flight)
//   Zero3      (3)  + parameters: one bucket per unit; a unit's full
//                   parameters are gathered before its forward/backward
//                   (the next unit's gather prefetched) and freed after
#pragma once

#include <memory>

#include "parallel/dp/state.h"

namespace braid::parallel::dp {

class ZeroPolicy {
 public:
  explicit ZeroPolicy(State& s) : s_(s) {}
  virtual ~ZeroPolicy() = default;
  ZeroPolicy(const ZeroPolicy&) = delete;
  ZeroPolicy& operator=(const ZeroPolicy&) = delete;

  // The policy of s.opts.zero. Throws Error(kInvalidArgument) for a stage
  // outside 0..3 or options the stage does not support.
  static std::unique_ptr<ZeroPolicy> make(State& s);
  virtual int stage() const = 0;

  // What this rank holds only its chunk of, between steps.
  virtual bool shards_optimizer() const = 0;
  virtual bool shards_grads() const = 0;
  virtual bool shards_params() const = 0;

  // ---- layout ----
  // One bucket per unit (so that whole units can be gathered and freed),
  // instead of buckets cut by size.
  virtual bool bucket_per_unit() const { return false; }
  // `full` holds the bucket's initial values (rank 0's): keep what this
  // rank holds and point the parameters at it.
  virtual void place_params(Bucket& b, Tensor&& full) = 0;
  // Allocate the gradient storage this rank keeps.
  virtual void place_grads(Bucket& b) = 0;

  // ---- one step ----
  virtual void begin_step(Bucket& b) = 0;
  virtual void before_forward(size_t unit);
  virtual void after_forward(size_t unit) { (void)unit; }
  virtual void before_backward(size_t unit);
  virtual void after_backward(size_t unit) { (void)unit; }
  // Sum a full f32 bucket across ranks into what this rank keeps: blocking
  // (on this thread) or started on the communicator's worker.
  virtual void reduce(Bucket& b) = 0;
  virtual Work reduce_async(Bucket& b) = 0;
  // World of one: the bucket is its own sum.
  virtual void reduce_alone(Bucket& b) { (void)b; }
  // The bucket's reduction has ended.
  virtual void reduced(Bucket& b) { (void)b; }
  // Global L2 norm of the reduced gradients; scales them when it exceeds
  // max_norm > 0.
  virtual double clip_grad_norm(double max_norm) = 0;
  virtual void optimizer_step(nn::Optimizer& opt, float lr) = 0;

  // ---- parameters ----
  // Start making the bucket's full parameters current (nothing when they
  // are); State::wait_params waits for it.
  virtual void gather_params(Bucket& b) { (void)b; }
  // Free the bucket's full parameters (nothing unless they are sharded).
  virtual void release_params(Bucket& b) { (void)b; }

 protected:
  State& s_;
};

class Replicated : public ZeroPolicy {
 public:
  using ZeroPolicy::ZeroPolicy;
  int stage() const override { return 0; }
  bool shards_optimizer() const override { return false; }
  bool shards_grads() const override { return false; }
  bool shards_params() const override { return false; }
  void place_params(Bucket& b, Tensor&& full) override;
  void place_grads(Bucket& b) override;
  void begin_step(Bucket& b) override;
  void reduce(Bucket& b) override;
  Work reduce_async(Bucket& b) override;
  double clip_grad_norm(double max_norm) override;
  void optimizer_step(nn::Optimizer& opt, float lr) override;
};

class Zero1 : public Replicated {
 public:
  using Replicated::Replicated;
  int stage() const override { return 1; }
  bool shards_optimizer() const override { return true; }
  double clip_grad_norm(double max_norm) override;
  void optimizer_step(nn::Optimizer& opt, float lr) override;
  void gather_params(Bucket& b) override;
};

class Zero2 : public Zero1 {
 public:
  using Zero1::Zero1;
  int stage() const override { return 2; }
  bool shards_grads() const override { return true; }
  void place_grads(Bucket& b) override;
  void begin_step(Bucket& b) override;
  void after_backward(size_t unit) override;
  void reduce(Bucket& b) override;
  Work reduce_async(Bucket& b) override;
  void reduce_alone(Bucket& b) override;
  void reduced(Bucket& b) override;
};

class Zero3 : public Zero2 {
 public:
  using Zero2::Zero2;
  int stage() const override { return 3; }
  bool shards_params() const override { return true; }
  bool bucket_per_unit() const override { return true; }
  void place_params(Bucket& b, Tensor&& full) override;
  void before_forward(size_t unit) override;
  void after_forward(size_t unit) override;
  void before_backward(size_t unit) override;
  void after_backward(size_t unit) override;
  void optimizer_step(nn::Optimizer& opt, float lr) override;
  void gather_params(Bucket& b) override;
  void release_params(Bucket& b) override;
};

}  // namespace braid::parallel::dp
