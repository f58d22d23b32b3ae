// --pp-balance: the GPT's top-level modules timed one at a time, for
// partition_layers. Only world rank 0's tp group times them (its layers'
// collectives need the whole group); the other ranks wait in the
// broadcast, so the timings are not disturbed by theirs and every rank cuts
// the same stages from the same numbers.
//
// Each module is built alone without initialisation (TpGptOptions::
// initialise false): a module's time does not depend on its weights, and
// memory stays at one module, not the model that may not fit one rank.
// Its input is the previous module's output, so every module sees the
// shapes it sees in training (sequence parallelism included).
#include <algorithm>
#include <limits>

#include "braid/comm.h"
#include "braid/env.h"
#include "braid/error.h"
#include "braid/hybrid.h"

namespace braid::parallel {

std::vector<double> measure_gpt_module_costs(const Mesh& mesh, const nn::GptConfig& cfg,
                                             uint64_t seed, int64_t rows,
                                             bool sequence_parallel, int reps) {
  BRAID_CHECK_ARG(rows >= 1, "pp balance: micro-batch of " + std::to_string(rows) + " rows");
  BRAID_CHECK_ARG(reps >= 1, "pp balance: " + std::to_string(reps) + " timed repetitions");
  const size_t count = tp::gpt_module_count(cfg);
  std::vector<double> cost(count, 0.0);
  if (mesh.coord().dp == 0 && mesh.coord().pp == 0) {
    tp::VocabParallelCrossEntropy loss(mesh.tp());
    const Tensor targets({rows, cfg.context}, DType::kI32);
    Tensor x({rows, cfg.context}, DType::kI32);  // token 0 everywhere
    for (size_t i = 0; i < count; ++i) {
      tp::TpGptOptions o;
      o.sequence_parallel = sequence_parallel;
      o.modules = {{i, i + 1}};
      o.initialise = false;
      tp::TpGpt one(cfg, seed, mesh.tp(), o);
      nn::Module& m = one.module(i);
      if (i > 0) m.set_input_grad(true);  // a later stage sends it back
      const bool head = i + 1 == count;
      Tensor dy;
      double best = std::numeric_limits<double>::infinity();
      for (int r = 0; r <= reps; ++r) {  // round 0 warms up (allocations, caches)
        nn::Context ctx;
        ctx.seed = seed;
        const double t0 = now_s();
        const Tensor& y = m.forward(x, ctx);
        if (head) {
          loss.forward(y, targets);
          m.backward(loss.backward(1.0f), ctx);
        } else {
          if (dy.shape() != y.shape()) dy = Tensor(y.shape());
          m.backward(dy, ctx);
        }
        if (r > 0) best = std::min(best, now_s() - t0);
        if (r == reps && !head) x = y;  // the next module's input (a deep copy)
      }
      cost[i] = best;
    }
  }
  mesh.world()->broadcast(cost.data(), cost.size(), DType::kF64, 0);
  return cost;
}

}  // namespace braid::parallel
