// The ep and expert-data-parallel groups inside a mesh's dp group
// (expert_parallel.h).
#include "braid/error.h"
#include "braid/expert_parallel.h"

namespace braid::parallel {

void check_expert_layout(int dp, int ep) {
  BRAID_CHECK_ARG(ep >= 1, "expert parallel: ep " + std::to_string(ep) + " (at least 1)");
  BRAID_CHECK_ARG(dp % ep == 0, "expert parallel: ep " + std::to_string(ep) +
                                    " does not divide dp " + std::to_string(dp) +
                                    " (ep groups are ep consecutive data-parallel ranks)");
}

ExpertGroups make_expert_groups(const Mesh& mesh, int ep) {
  check_expert_layout(mesh.dp_size(), ep);
  ExpertGroups g;
  g.ep = ep;
  const int d = mesh.coord().dp;
  g.ep_comm = mesh.dp()->split(d / ep, d % ep);
  g.edp_comm = mesh.dp()->split(d % ep, d / ep);
  return g;
}

}  // namespace braid::parallel
