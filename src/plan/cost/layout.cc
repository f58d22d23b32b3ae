// A layout as the planner takes it: its text, its recomputation names, and
// the checks that it fits the model and the cluster (plan_cost.h,
// plan/cost/layout.h).
#include "plan/cost/layout.h"

#include <string>

#include "braid/error.h"

namespace braid::plan {
namespace {

[[noreturn]] void refuse(const std::string& field, const std::string& why) {
  throw Error(Errc::kInvalidArgument, "layout: " + field + ": " + why);
}

}  // namespace

void validate_layout(const ModelDesc& m, const Cluster& c, const Layout& l, int64_t batch) {
  if (l.tp < 1 || l.pp < 1 || l.dp < 1 || l.mbs < 1) refuse("tp/pp/dp/mbs", "must be >= 1");
  if (l.zero < 0 || l.zero > 3) refuse("zero", "must be 0, 1, 2 or 3");
  if (batch < 1) refuse("batch", "must be >= 1");
  if (batch % (int64_t(l.dp) * l.mbs) != 0)
    refuse("batch", std::to_string(batch) + " is not a multiple of dp × mbs = " +
                        std::to_string(l.dp * l.mbs));
  if (m.kind != "gpt" && (l.tp > 1 || l.pp > 1))
    refuse("tp/pp", "model parallelism is planned for the GPT only; " + m.kind + " runs dp");
  if (l.tp > c.devices_per_host)
    refuse("tp", std::to_string(l.tp) + " spans hosts (a host has " +
                     std::to_string(c.devices_per_host) + " devices)");
  if (m.kind == "gpt") {
    if (m.gpt.heads % l.tp != 0) refuse("tp", "heads " + std::to_string(m.gpt.heads) + " not a multiple of tp");
    if (m.gpt.hidden % l.tp != 0) refuse("tp", "hidden not a multiple of tp");
    if (m.gpt.vocab % l.tp != 0) refuse("tp", "vocab not a multiple of tp (braid splits the head by it)");
  }
  if (l.sequence_parallel && l.tp == 1) refuse("sequence_parallel", "needs tp > 1");
  if (l.zero >= 2 && l.pp > 1) refuse("zero", "stages 2 and 3 with pp > 1 are not planned");
  const int64_t micro = batch / (int64_t(l.dp) * l.mbs);
  if (l.schedule == "interleaved") {
    if (l.virtual_stages < 2) refuse("virtual_stages", "interleaved needs >= 2");
    if (l.pp < 2) refuse("schedule", "interleaved needs pp >= 2");
    if (micro % l.pp != 0) refuse("schedule", "interleaved needs micro-batches a multiple of pp");
  } else if (l.schedule == "gpipe" || l.schedule == "1f1b") {
    if (l.virtual_stages != 1) refuse("virtual_stages", "only the interleaved schedule has them");
  } else {
    refuse("schedule", "'" + l.schedule + "' (gpipe, 1f1b, interleaved)");
  }
  if (m.kind == "gpt" && m.gpt.layers < int64_t(l.pp) * l.virtual_stages)
    refuse("pp", "fewer blocks than pipeline stages");
}

const char* recompute_name(Recompute r) {
  return r == Recompute::kNone ? "none" : r == Recompute::kSelective ? "selective" : "full";
}

Recompute parse_recompute(const std::string& s) {
  if (s == "none") return Recompute::kNone;
  if (s == "selective") return Recompute::kSelective;
  if (s == "full") return Recompute::kFull;
  throw Error(Errc::kInvalidArgument, "recompute '" + s + "': expected none, selective or full");
}

std::string layout_text(const Layout& l) {
  std::string s = "tp=" + std::to_string(l.tp) + " pp=" + std::to_string(l.pp) +
                  " dp=" + std::to_string(l.dp) + " mbs=" + std::to_string(l.mbs);
  if (l.pp > 1) {
    s += ' ';
    s += l.schedule;
    if (l.virtual_stages > 1) s += 'x' + std::to_string(l.virtual_stages);
  }
  s += " zero=" + std::to_string(l.zero) + " recompute=" + recompute_name(l.recompute);
  if (l.sequence_parallel) s += " sp";
  return s;
}

}  // namespace braid::plan
