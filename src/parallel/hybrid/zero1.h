// ZeRO-1 for HybridGpt: optimizer state sharded over the dp group.
//
// A stage's parameters, packed in order, form one index space of N
// elements; dp rank r owns [r·P, min((r+1)·P, N)) with P = ⌈N / dp⌉. Its
// optimizer sees "pieces": parameters named as the whole ones (state is
// kept per name) whose data and grad are views of the owned elements. After
// the gradient all_reduce every dp rank holds the full summed gradients, so
// clipping is unchanged; then each rank updates its pieces (AdamW and SGD
// are elementwise, so a piece's update equals the whole one's) and one
// all_gather of P floats per rank brings everyone's updated elements.
#pragma once

#include <memory>
#include <vector>

#include "braid/checkpoint.h"
#include "braid/comm.h"
#include "braid/optim.h"

namespace braid::parallel {

class Zero1 {
 public:
  Zero1(const std::vector<nn::Parameter*>& params, std::shared_ptr<Communicator> dp);
  // Updates this rank's pieces, then all_gathers the parameters. Returns
  // the seconds spent in the all_gather.
  double step(nn::Optimizer& opt, float lr);
  int64_t owned_elements() const { return owned_; }
  // Collective over dp: `opt`'s state of the pieces as whole-parameter
  // tensors "optim/<name>/<slot>" (plus its meta) on every dp rank.
  Checkpoint gather_state(const nn::Optimizer& opt);
  // The inverse: loads this rank's pieces of whole-parameter state.
  void load_state(const Checkpoint& whole, nn::Optimizer& opt);

 private:
  struct Piece {
    size_t param = 0;       // index into params_
    int64_t offset = 0;     // first element within that parameter
    std::unique_ptr<nn::Parameter> view;
  };
  std::vector<nn::Parameter*> params_;
  std::vector<int64_t> starts_;  // packed index of each parameter's element 0
  std::shared_ptr<Communicator> dp_;
  int64_t per_rank_ = 0, owned_ = 0;
  std::vector<Piece> pieces_;
  std::vector<nn::Parameter*> piece_ptrs_;
  Tensor mine_, all_;
};

}  // namespace braid::parallel
