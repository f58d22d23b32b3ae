// --pp-balance: the spec's units timed one at a time, for partition_layers.
// Only world rank 0's tp group times them (its layers' collectives need the
// whole group); the other ranks wait in the broadcast, so the timings are
// not disturbed by theirs and every rank cuts the same stages from the same
// numbers.
//
// Each unit is built alone without initialisation (ShardedOptions::
// initialise false): a unit's time does not depend on its weights, and
// memory stays at one unit, not the model that may not fit one rank. Its
// input is the previous unit's output, so every unit sees the shapes it
// sees in training (sequence parallelism included).
#include <algorithm>
#include <limits>

#include "braid/comm.h"
#include "braid/env.h"
#include "braid/error.h"
#include "braid/parallelize.h"

namespace braid::parallel {

std::vector<double> measure_unit_costs(const Mesh& mesh, std::shared_ptr<const ModelSpec> spec,
                                       int64_t rows, bool sequence_parallel, int reps) {
  BRAID_CHECK_ARG(spec != nullptr, "pp balance: no model spec");
  BRAID_CHECK_ARG(rows >= 1, "pp balance: micro-batch of " + std::to_string(rows) + " rows");
  BRAID_CHECK_ARG(reps >= 1, "pp balance: " + std::to_string(reps) + " timed repetitions");
  const size_t count = spec->unit_count();
  std::vector<double> cost(count, 0.0);
  if (mesh.coord().dp == 0 && mesh.coord().pp == 0) {
    std::unique_ptr<nn::Loss> loss = spec->make_loss(mesh.tp());
    const Tensor targets = spec->sample_target(rows);
    Tensor x = spec->sample_input(rows);
    for (size_t i = 0; i < count; ++i) {
      ShardedOptions o;
      o.sequence_parallel = sequence_parallel;
      o.units = {{i, i + 1}};
      o.initialise = false;
      ShardedModel one(spec, mesh.tp(), o);
      nn::Module& m = one.unit(i);
      if (i > 0) m.set_input_grad(true);  // a later stage sends it back
      const bool head = i + 1 == count;
      Tensor dy;
      double best = std::numeric_limits<double>::infinity();
      for (int r = 0; r <= reps; ++r) {  // round 0 warms up (allocations, caches)
        nn::Context ctx;
        ctx.seed = spec->seed();
        const double t0 = now_s();
        const Tensor& y = m.forward(x, ctx);
        if (head) {
          loss->forward(y, targets);
          m.backward(loss->backward(1.0f), ctx);
        } else {
          if (dy.shape() != y.shape()) dy = Tensor(y.shape());
          m.backward(dy, ctx);
        }
        if (r > 0) best = std::min(best, now_s() - t0);
        if (r == reps && !head) x = y;  // the next unit's input (a deep copy)
      }
      cost[i] = best;
    }
  }
  mesh.world()->broadcast(cost.data(), cost.size(), DType::kF64, 0);
  return cost;
}

}  // namespace braid::parallel
