// The planner's model descriptions (braid/plan_model.h): the text after
// `braid plan --model`, or a model file's, through parse_model (which
// load_model calls on a file's text), then what the planner first asks
// of a model it accepted: its parameters and FLOPs per sample.
#include <string>

#include "braid/error.h"
#include "braid/plan_model.h"
#include "fuzz_target.h"

BRAID_FUZZ_TARGET(model) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const braid::plan::ModelDesc m = braid::plan::parse_model(text);
    (void)m.params();
    (void)m.forward_flops_per_sample();
  } catch (const braid::Error&) {
  }
}
