// Tensor parallelism's communication, as Megatron names it: each operator is
// an nn::Module whose forward and backward are the two halves of one named
// operation over the tp group (copy to / reduce from the tp region, scatter
// / gather along the last dimension, and the sequence-parallel all_gather
// / reduce_scatter). The layers that use them: tp_layers.h.
//
// Every operator takes its tp communicator explicitly (a Mesh's tp(), or
// any communicator). All ranks of the group must call the same operators
// in the same order (each one is collective).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "braid/comm.h"
#include "braid/module.h"
#include "braid/tensor.h"

namespace braid::parallel::tp {

// size / parts, or Error(kInvalidArgument) "<what> <size> is not divisible
// by the tensor-parallel size <parts>".
int64_t divide(int64_t size, int64_t parts, const std::string& what);

// Each is a Module: forward and backward are the two halves of one named
// operator. Outputs are buffers the operator owns (or its input, for an
// identity half).

// What every operator holds: its group, its outputs and a staging buffer.
class TpOperator : public nn::Module {
 public:
  TpOperator(std::string name, std::shared_ptr<Communicator> tp)
      : Module(std::move(name)), tp_(std::move(tp)) {}
  void release_activations() override {
    y_.release();
    dx_.release();
    scratch_.release();
  }

 protected:
  std::shared_ptr<Communicator> tp_;
  Tensor y_, dx_, scratch_;
};

// Identity forward; backward all-reduces (sums) dL/dx over the group. Sits
// where a replicated activation enters column-parallel weights.
class CopyToTpRegion : public TpOperator {
 public:
  using TpOperator::TpOperator;
  const Tensor& forward(const Tensor& x, nn::Context& ctx) override;
  const Tensor& backward(const Tensor& dy, nn::Context& ctx) override;
};

// Forward all-reduces (sums) partial results; identity backward. Sits after
// row-parallel weights.
class ReduceFromTpRegion : public TpOperator {
 public:
  using TpOperator::TpOperator;
  const Tensor& forward(const Tensor& x, nn::Context& ctx) override;
  const Tensor& backward(const Tensor& dy, nn::Context& ctx) override;
};

// Forward keeps this rank's block of the last dim; backward all-gathers
// the blocks of dL/dx along the last dim.
class ScatterToTpRegion : public TpOperator {
 public:
  using TpOperator::TpOperator;
  const Tensor& forward(const Tensor& x, nn::Context& ctx) override;
  const Tensor& backward(const Tensor& dy, nn::Context& ctx) override;
};

// Forward all-gathers the blocks of the last dim; backward keeps this
// rank's block of dL/dy.
class GatherFromTpRegion : public TpOperator {
 public:
  using TpOperator::TpOperator;
  const Tensor& forward(const Tensor& x, nn::Context& ctx) override;
  const Tensor& backward(const Tensor& dy, nn::Context& ctx) override;
};

// Sequence parallelism (input [B, T, ...], split along T):
// forward keeps this rank's positions; backward all-gathers dL/dx along T.
class ScatterToSequenceRegion : public TpOperator {
 public:
  using TpOperator::TpOperator;
  const Tensor& forward(const Tensor& x, nn::Context& ctx) override;
  const Tensor& backward(const Tensor& dy, nn::Context& ctx) override;
};

// Forward all-gathers along T; backward reduce-scatters (sums) dL/dy along
// T. Replaces CopyToTpRegion in front of column-parallel weights.
class GatherFromSequenceRegion : public TpOperator {
 public:
  using TpOperator::TpOperator;
  const Tensor& forward(const Tensor& x, nn::Context& ctx) override;
  const Tensor& backward(const Tensor& dy, nn::Context& ctx) override;
};

// Forward reduce-scatters (sums) along T; backward all-gathers dL/dy along
// T. Replaces ReduceFromTpRegion after row-parallel weights.
class ReduceScatterToSequenceRegion : public TpOperator {
 public:
  using TpOperator::TpOperator;
  const Tensor& forward(const Tensor& x, nn::Context& ctx) override;
  const Tensor& backward(const Tensor& dy, nn::Context& ctx) override;
};

}  // namespace braid::parallel::tp
